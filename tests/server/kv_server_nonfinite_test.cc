// KVServer fed non-finite gradients (kv_server_fixture.h): the step is skipped and rolled
// back, and the answers say so.
#include <gtest/gtest.h>

#include <limits>

#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {
using namespace kv_server_test;  // NOLINT: the fixture and its helpers

TEST_F(KVServerTest, ANonFiniteStepIsSkippedAndRolledBackWeightsAndMomentum) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto grad = [](int rank, uint64_t key, int step) {
    return Values({0.25f * (rank + 1) + 0.5f * step + key, -0.125f * (step + 1)});
  };
  auto init = [this] {
    Make(2);
    SetOptimizer(/*lr=*/0.5f, /*async=*/false, /*momentum=*/0.9f);
    Init(0, {1.f, 2.f});
    Init(1, {3.f, -1.f});
  };

  // The reference: steps 0 and 2 only.
  init();
  for (int g : {0, 2}) {
    const int64_t t = g == 0 ? 0 : 1;
    for (uint64_t key : {0u, 1u}) {
      Push(0, key, t, grad(0, key, g));
      Push(1, key, t, grad(1, key, g));
    }
  }
  const std::vector<float> want0 = Floats(server_->Value(0, 0)), want1 = Floats(server_->Value(1, 0));

  init();
  for (uint64_t key : {0u, 1u}) {
    Push(0, key, 0, grad(0, key, 0));
    Push(1, key, 0, grad(1, key, 0));
  }
  const std::vector<float> after0 = Floats(server_->Value(0, 0)), after0_key1 = Floats(server_->Value(1, 0));
  // Step 1: key 0 is fine and is updated.
  EXPECT_TRUE(Send(PushPullRequest(0, 0, 1, grad(0, 0, 1))).empty());
  auto key0 = Send(PushPullRequest(1, 0, 1, grad(1, 0, 1)));
  ASSERT_EQ(key0.size(), 2u);
  EXPECT_FALSE(key0[1].second.meta.skipped());
  EXPECT_NE(Floats(key0[1].second.data[0]), after0);
  // Key 1: worker 1's gradient has a NaN.
  EXPECT_TRUE(Send(PushPullRequest(0, 1, 1, grad(0, 1, 1))).empty());
  Tensor bad = grad(1, 1, 1);
  bad.data<float>()[1] = nan;
  auto out = Send(PushPullRequest(1, 1, 1, bad));
  ASSERT_EQ(out.size(), 2u);
  for (const auto& [to, answer] : out) {
    EXPECT_TRUE(answer.meta.skipped()) << "to node " << to;
    ASSERT_EQ(answer.meta.nonfinite_workers_size(), 1);
    EXPECT_EQ(answer.meta.nonfinite_workers(0), 1);
    EXPECT_EQ(Floats(answer.data[0]), after0_key1);
  }
  EXPECT_EQ(server_->AppliedStep(1, 0), 1);
  for (int rank : {0, 1}) {
    for (uint64_t key : {0u, 1u}) {
      Message back = Ok(RollbackRequest(rank, key, 1, 2));
      EXPECT_TRUE(back.meta.skipped());
      EXPECT_EQ(Floats(back.data[0]), key == 0 ? after0 : after0_key1) << "worker " << rank << " key " << key;
    }
  }
  EXPECT_EQ(Floats(server_->Value(0, 0)), after0);
  // A pull of step 1 says it was skipped, too.
  EXPECT_TRUE(Ok(PullRequest(0, 0, 1, 2)).meta.skipped());
  for (uint64_t key : {0u, 1u}) {
    Push(0, key, 2, grad(0, key, 2));
    Push(1, key, 2, grad(1, key, 2));
  }
  EXPECT_EQ(Floats(server_->Value(0, 0)), want0);
  EXPECT_EQ(Floats(server_->Value(1, 0)), want1);
  EXPECT_FALSE(Ok(PullRequest(1, 0, 2, 2)).meta.skipped());
}

// A ROLLBACK may arrive before its step is applied on a slice (a worker that pulled only
// some keys): the step is skipped once its pushes are in, and the rollback is answered then.
// Only the last step applied can be undone.
TEST_F(KVServerTest, ARollbackAheadOfItsStepSkipsItOnceItsPushesAreIn) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(0, {1.f});
  Push(0, 0, 0, Values({5.f}));
  Message rollback = RollbackRequest(0, 0, 0, 1);
  const uint64_t id = rollback.meta.request_id();
  EXPECT_TRUE(Send(std::move(rollback)).empty());
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  Message last = Request(wire::PUSH, Worker(1), 0);
  AddSlice(&last, 0, 0, Values({5.f}));
  auto out = Send(std::move(last));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].second.meta.request_id(), id);
  EXPECT_TRUE(out[1].second.meta.skipped());
  EXPECT_EQ(Floats(out[1].second.data[0]), (std::vector<float>{1.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  Push(0, 0, 1, Values({1.f}));
  Push(1, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-1.f}));
  Refused(RollbackRequest(1, 0, 0, 1), "only the last step");
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-1.f}));
}

TEST_F(KVServerTest, ASumThatOverflowsIsSkippedNamingNoWorker) {
  Make(2);
  Init(0, {0.f});
  EXPECT_TRUE(Send(PushPullRequest(0, 0, 0, Values({3e38f}))).empty());
  auto out = Send(PushPullRequest(1, 0, 0, Values({3e38f})));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].second.meta.skipped());
  EXPECT_EQ(out[0].second.meta.nonfinite_workers_size(), 0);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{0.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
}

TEST_F(KVServerTest, AsyncLeavesOutANonFinitePushAndSaysSo) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/true);
  Init(0, {1.f, 1.f}, /*async=*/true);
  Message nan_push = Request(wire::PUSH, Worker(1), 0);
  AddSlice(&nan_push, 0, 0, Values({std::numeric_limits<float>::quiet_NaN(), 1.f}));
  Message answer = Ok(std::move(nan_push));
  EXPECT_TRUE(answer.meta.skipped());
  ASSERT_EQ(answer.meta.nonfinite_workers_size(), 1);
  EXPECT_EQ(answer.meta.nonfinite_workers(0), 1);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{1.f, 1.f}));
  Message fine = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&fine, 0, 0, Values({1.f, 0.5f}));
  EXPECT_FALSE(Ok(std::move(fine)).meta.skipped());
  Message inf = Ok(PushPullRequest(1, 0, 1, Values({std::numeric_limits<float>::infinity(), 0.f})));
  EXPECT_TRUE(inf.meta.skipped());
  EXPECT_EQ(Floats(inf.data[0]), (std::vector<float>{0.f, 0.5f}));
  Refused(RollbackRequest(0, 0, 1, 2), "dist_async");
}

}  // namespace
}  // namespace tally
