// KVServer fed duplicated and reordered messages (kv_server_fixture.h): each step applies
// once, in order, and no request is answered twice.
#include <gtest/gtest.h>

#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {
using namespace kv_server_test;  // NOLINT: the fixture and its helpers

TEST_F(KVServerTest, ADuplicatePushCountsOnceBeforeAndAfterItsStepIsApplied) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(0, {0.f});
  Message first = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&first, 0, 0, Values({1.f}));
  Message copy = first;
  Ok(std::move(first));
  Ok(std::move(copy));
  Push(0, 0, 0, Values({100.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), -1) << "worker 0's copies stood in for worker 1";
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-3.f}));
  Push(1, 0, 0, Values({50.f}));
  Push(0, 0, 0, Values({50.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-3.f}));
  EXPECT_EQ(server_->NumDuplicates(), 4);
  Push(0, 0, 1, Values({1.f}));
  Push(1, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-5.f}));
}

// A PUSHPULL copy: while the first still waits, the one answer serves both (one answer per
// request id); once its step is applied, the same answer again; once a later step has
// changed the values, none (the first answer went out before the change).
TEST_F(KVServerTest, ADuplicatePushPullNeverGetsAnAnswerTheFirstDidNotGet) {
  Make(2);
  Init(0, {1.f, 2.f});
  Message first = PushPullRequest(0, 0, 0, Values({1.f, 1.f}));
  const uint64_t id = first.meta.request_id();
  Message copy = first;
  EXPECT_TRUE(Send(std::move(first)).empty());
  EXPECT_TRUE(Send(std::move(copy)).empty());
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  auto out = Send(PushPullRequest(1, 0, 0, Values({2.f, 2.f})));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].second.meta.request_id(), id);
  EXPECT_EQ(Floats(out[0].second.data[0]), (std::vector<float>{3.f, 3.f}));  // no optimizer: the sum
  EXPECT_EQ(out[1].first, Worker(1));

  Message late = PushPullRequest(0, 0, 0, Values({7.f, 7.f}));
  late.meta.set_request_id(id);
  Message again = Ok(std::move(late));
  EXPECT_EQ(Floats(again.data[0]), (std::vector<float>{3.f, 3.f}));
  EXPECT_FALSE(again.meta.skipped());

  Push(0, 0, 1, Values({1.f, 1.f}));
  Push(1, 0, 1, Values({1.f, 1.f}));
  Message stale = PushPullRequest(0, 0, 0, Values({7.f, 7.f}));
  stale.meta.set_request_id(id);
  EXPECT_TRUE(Send(std::move(stale)).empty());
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{2.f, 2.f}));
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
  EXPECT_EQ(server_->NumDuplicates(), 3);
}

TEST_F(KVServerTest, ReorderedAndDuplicatedPushesApplyEachStepOnceInOrder) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(0, {0.f});
  // Worker 0's step 1 overtakes its step 0, and every push of worker 0 arrives twice.
  Push(0, 0, 1, Values({10.f}));
  Push(0, 0, 1, Values({10.f}));
  Push(1, 0, 1, Values({20.f}));
  Push(0, 0, 0, Values({1.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), -1);
  Push(0, 0, 0, Values({1.f}));
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 1);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-33.f}));
  EXPECT_EQ(server_->NumDuplicates(), 2);
}

TEST_F(KVServerTest, AsyncCountsEachWorkersStepOnceWhateverTheArrivalOrder) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/true);
  Init(0, {0.f}, /*async=*/true);
  Push(0, 0, 1, Values({1.f}));  // step 1 before step 0
  Push(0, 0, 1, Values({1.f}));
  Push(0, 0, 0, Values({2.f}));
  Push(0, 0, 0, Values({2.f}));
  Push(1, 0, 0, Values({4.f}));  // worker 1's step 0 is its own
  Push(0, 0, 2, Values({8.f}));
  Push(0, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-15.f}));
  EXPECT_EQ(server_->NumDuplicates(), 3);
}

// Non-finite gradients (docs/wire.md). Step 1 of worker 1's gradient of key 1 holds a NaN:
// key 1 is not updated, and every answer of its step 1 says so, naming worker 1. Key 0 was
// updated (nobody could know yet); the workers' ROLLBACKs put its weights and momentum back,
// however many of them ask. After step 2 every value equals that of a server that was never
// sent step 1 at all.

}  // namespace
}  // namespace tally
