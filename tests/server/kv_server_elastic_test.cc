// Elastic workers on a server (--elastic; server.h SetElastic, slice_aggregator.h
// WorkerMembership): a leaver's pushes counted through the reported step and forgotten
// from the MEMBERSHIP's step on, no step applied while the change is decided, each step
// waiting for the workers live at it, --elastic-lr keep and linear, and the refusals.
#include <limits>

#include <gtest/gtest.h>

#include "tests/server/kv_server_fixture.h"
#include "server/slice_aggregator.h"

namespace tally {
namespace kv_server_test {
namespace {

Tensor One(float v) { return Values({v}); }

TEST(ElasticAggregator, StepsWaitForTheWorkersLiveAtThemAndDropForgetsALeaver) {
  WorkerMembership members;
  SliceAggregator agg(3, 1, &members);
  agg.AddSync(0, 0, One(1), 1.f);
  agg.AddSync(0, 2, One(3), 1.f);
  agg.AddSync(1, 2, One(5), 1.f);
  EXPECT_EQ(agg.CountedThrough(2, /*applied=*/-1), 1);  // steps 0 and 1 hold worker 2's push
  EXPECT_EQ(agg.CountedThrough(1, -1), -1);
  members.changes.push_back({/*from_step=*/1, {true, true, false}});
  agg.Drop(2, 1);
  EXPECT_EQ(agg.CountedThrough(2, -1), 0);
  SliceAggregator::Step st;
  EXPECT_FALSE(agg.TakeReady(-1, &st));  // step 0 still counts worker 2 and waits for worker 1
  agg.AddSync(0, 1, One(2), 1.f);
  members.hold = true;
  EXPECT_FALSE(agg.TakeReady(-1, &st));  // a change being decided holds every step
  members.hold = false;
  ASSERT_TRUE(agg.TakeReady(-1, &st));
  EXPECT_EQ(st.grads.size(), 3u);
  agg.AddSync(1, 1, One(7), 1.f);
  agg.AddSync(1, 0, One(6), 1.f);
  ASSERT_TRUE(agg.TakeReady(0, &st));  // step 1: workers 0 and 1 alone, in rank order
  ASSERT_EQ(st.grads.size(), 2u);
  EXPECT_EQ(Floats(st.grads[0]), std::vector<float>{6});
  EXPECT_EQ(Floats(st.grads[1]), std::vector<float>{7});
  EXPECT_EQ(members.Count(0, 3), 3);
  EXPECT_EQ(members.Count(1, 3), 2);
  EXPECT_FALSE(members.Live(2, 1));
  EXPECT_TRUE(members.Live(2, 0));
}

class KVServerElasticTest : public KVServerTest {
 protected:
  // Three workers; a server that keeps what it sends to the scheduler apart.
  void MakeElastic(bool keep_lr) {
    workers_ = 3;
    server_ = std::make_unique<KVServer>(1, 3, [this](int id, Message m) {
      (id == kSchedulerId ? to_scheduler_ : sent_).push_back({id, std::move(m)});
      return Status::Ok();
    });
    server_->SetElastic(keep_lr);
    SetOptimizer(/*lr=*/1.0f, /*async=*/false);
    Init(0, {0.f});
    Init(1, {0.f});
  }
  void Notice(wire::Command c, int64_t epoch, int64_t step, const std::vector<int>& ranks, int64_t skip = -1) {
    Message m;
    m.meta.set_skipped_step(skip + 1);
    m.meta.set_command(c);
    m.meta.set_sender_id(kSchedulerId);
    m.meta.set_membership_epoch(epoch);
    m.meta.set_step(step);
    for (int r : ranks) {
      wire::Node* n = m.meta.add_nodes();
      n->set_role(wire::WORKER);
      n->set_rank(r);
    }
    server_->Handle(std::move(m));
  }
  float Pulled(uint64_t key, int64_t step) {
    auto out = Send(PullRequest(0, key, step, 1));
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? -1e9f : Floats(out[0].second.data.at(0))[0];
  }
  Sent to_scheduler_;
};

TEST_F(KVServerElasticTest, ALeaverCountsThroughTheReportedStepOnEverySliceAndNotAfter) {
  MakeElastic(/*keep_lr=*/false);
  for (int r = 0; r < 3; ++r) Push(r, 0, 0, One(1));
  for (int r = 0; r < 3; ++r) Push(r, 1, 0, One(1));
  // Step 1: worker 2 pushed key 0 and died before key 1.
  Push(0, 0, 1, One(1));
  Push(2, 0, 1, One(4));
  Push(0, 1, 1, One(1));
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {2});
  ASSERT_EQ(to_scheduler_.size(), 1u);
  const wire::Meta& report = to_scheduler_[0].second.meta;
  EXPECT_EQ(report.command(), wire::MEMBERSHIP_REPORT);
  EXPECT_EQ(report.membership_epoch(), 1);
  EXPECT_EQ(report.step(), 0);  // key 1 lacks its push of step 1
  EXPECT_EQ(report.applied_max(), 0);
  Refused(PushPullRequest(2, 1, 1, One(1)), "worker 2 is leaving the job");
  // Worker 1's pushes complete step 1 but the change holds it.
  Push(1, 0, 1, One(2));
  Push(1, 1, 1, One(2));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  Notice(wire::MEMBERSHIP, 1, /*from_step=*/1, {0, 1});
  EXPECT_EQ(server_->AppliedStep(0, 0), 1);
  EXPECT_EQ(server_->AppliedStep(1, 0), 1);
  // --elastic-lr linear: the sum of the two live pushes, worker 2's 4 forgotten.
  EXPECT_EQ(Pulled(0, 1), -3.f - 3.f);
  EXPECT_EQ(Pulled(1, 1), -3.f - 3.f);
  Refused(PushPullRequest(2, 0, 2, One(1)), "worker 2 left the job before step 2");
  EXPECT_GE(server_->NumRefused(), 2);
}

TEST_F(KVServerElasticTest, AStepTheLeaverPushedToSomeSlicesOnlyIsSkippedOnAll) {
  MakeElastic(/*keep_lr=*/false);
  for (int r = 0; r < 3; ++r) Push(r, 0, 0, One(1));
  for (int r = 0; r < 3; ++r) Push(r, 1, 0, One(1));
  for (int r = 0; r < 3; ++r) Push(r, 0, 1, One(1));  // key 0 applies step 1 with worker 2
  Push(0, 1, 1, One(1));                               // key 1: worker 2's push lost
  EXPECT_EQ(server_->AppliedStep(0, 0), 1);
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {2});
  ASSERT_EQ(to_scheduler_.size(), 1u);
  EXPECT_EQ(to_scheduler_[0].second.meta.step(), 0);
  EXPECT_EQ(to_scheduler_[0].second.meta.applied_max(), 1);
  Notice(wire::MEMBERSHIP, 1, /*from_step=*/1, {0, 1}, /*skip=*/1);
  Push(1, 1, 1, One(1));
  auto a = Send(PullRequest(0, 0, 1, 1));
  auto b = Send(PullRequest(0, 1, 1, 1));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  // Both keys as after step 0, and both answers say step 1 was skipped.
  EXPECT_EQ(Floats(a[0].second.data.at(0))[0], -3.f);
  EXPECT_EQ(Floats(b[0].second.data.at(0))[0], -3.f);
  EXPECT_TRUE(a[0].second.meta.skipped());
  EXPECT_TRUE(b[0].second.meta.skipped());
  for (int r = 0; r < 2; ++r) Push(r, 0, 2, One(1));
  EXPECT_EQ(Pulled(0, 2), -5.f);  // step 2: the two live workers
}

TEST_F(KVServerElasticTest, KeepScalesAStepOfFewerWorkersToTheirMean) {
  MakeElastic(/*keep_lr=*/true);
  for (int r = 0; r < 3; ++r) Push(r, 0, 0, One(1));
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {1});
  Notice(wire::MEMBERSHIP, 1, /*from_step=*/1, {0, 2});
  Push(0, 0, 1, One(1));
  Push(2, 0, 1, One(2));
  // Step 0: 3 of 3, the sum as it is; step 1: 2 of 3, the sum times 3 / 2.
  EXPECT_EQ(Pulled(0, 1), -3.f - 4.5f);
}

TEST_F(KVServerElasticTest, Fp16PushesOfALeaverAreForgottenAsFp32Ones) {
  MakeElastic(/*keep_lr=*/false);
  for (uint64_t key : {0, 1}) {
    for (int r = 0; r < 3; ++r) Push(r, key, 0, Values({1.f}, DType::kF16));
    Push(2, key, 1, Values({8.f}, DType::kF16));
  }
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {2});
  ASSERT_EQ(to_scheduler_.size(), 1u);
  EXPECT_EQ(to_scheduler_[0].second.meta.step(), 1);  // its push of step 1 is in: it counts
  Notice(wire::MEMBERSHIP, 1, /*from_step=*/2, {0, 1});
  Push(0, 0, 1, Values({1.f}, DType::kF16));
  Push(1, 0, 1, Values({2.f}, DType::kF16));
  EXPECT_EQ(Pulled(0, 1), -3.f - 11.f);  // step 1 counts all three
  Push(0, 0, 2, Values({1.f}, DType::kF16));
  Push(1, 0, 2, Values({2.f}, DType::kF16));
  EXPECT_EQ(Pulled(0, 2), -3.f - 11.f - 3.f);  // step 2 the two live ones
}

TEST_F(KVServerElasticTest, AJoinerCountsFromItsStepOnAndNoStepAppliesWhileTheJoinIsDecided) {
  MakeElastic(/*keep_lr=*/false);
  for (uint64_t key : {0, 1}) {
    for (int r = 0; r < 3; ++r) Push(r, key, 0, One(1));
  }
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {2});
  Notice(wire::MEMBERSHIP, 1, /*from_step=*/1, {0, 1});  // worker 2 leaves
  for (uint64_t key : {0, 1}) {
    for (int r = 0; r < 2; ++r) Push(r, key, 1, One(1));
  }
  Notice(wire::MEMBERSHIP_PREPARE, 2, 0, {2});  // and registers again: a join
  ASSERT_EQ(to_scheduler_.size(), 2u);
  EXPECT_EQ(to_scheduler_[1].second.meta.membership_epoch(), 2);
  EXPECT_EQ(to_scheduler_[1].second.meta.applied_max(), 1);
  for (int r = 0; r < 2; ++r) Push(r, 0, 2, One(1));
  EXPECT_EQ(server_->AppliedStep(0, 0), 1);  // held while the join is decided
  Notice(wire::MEMBERSHIP, 2, /*from_step=*/3, {0, 1, 2});
  EXPECT_EQ(server_->AppliedStep(0, 0), 2);  // step 2: the two workers live at it
  EXPECT_EQ(Pulled(0, 2), -3.f - 2.f - 2.f);
  Refused(PushPullRequest(2, 0, 2, One(1)), "worker 2 left the job before step 2");
  for (int r = 0; r < 2; ++r) Push(r, 0, 3, One(1));
  EXPECT_EQ(server_->AppliedStep(0, 0), 2);  // step 3 waits for the joiner
  Push(2, 0, 3, One(4));
  EXPECT_EQ(server_->AppliedStep(0, 0), 3);
  EXPECT_EQ(Pulled(0, 3), -3.f - 2.f - 2.f - 6.f);
}

TEST_F(KVServerElasticTest, MembershipNoticesOfAnotherKindOfJobOrAnOldEpochAreRefused) {
  Make(2);  // not --elastic
  Notice(wire::MEMBERSHIP, 1, 1, {0});
  EXPECT_EQ(server_->NumRefused(), 1);
  MakeElastic(true);
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {2});
  Notice(wire::MEMBERSHIP, 1, 1, {0, 1});
  Notice(wire::MEMBERSHIP, 1, 1, {0});  // epoch 1 again
  EXPECT_EQ(server_->NumRefused(), 1);
  Message forged;  // from a worker
  forged.meta.set_command(wire::MEMBERSHIP);
  forged.meta.set_sender_id(Worker(0));
  forged.meta.set_membership_epoch(2);
  forged.meta.add_nodes()->set_role(wire::WORKER);
  server_->Handle(std::move(forged));
  EXPECT_EQ(server_->NumRefused(), 2);
}

// --elastic: worker 0 may leave, so every live worker sends SET_LR (the same rate), and the
// server takes it from a worker live at its step: worker 1's after worker 0 left, not worker
// 0's any more, nor a server's.
TEST_F(KVServerElasticTest, ASetLrIsTakenFromAWorkerLiveAtItsStepOnly) {
  MakeElastic(/*keep_lr=*/false);
  for (int r = 0; r < 3; ++r) Push(r, 0, 0, One(1));  // step 0 at lr 1
  EXPECT_EQ(Pulled(0, 0), -3.f);
  Notice(wire::MEMBERSHIP_PREPARE, 1, 0, {0});
  Notice(wire::MEMBERSHIP, 1, /*from_step=*/1, {1, 2});
  auto set_lr = [&](int sender, float lr) {
    Message m = Request(wire::SET_LR, sender, /*step=*/1);
    m.meta.set_lr(lr);
    return m;
  };
  Ok(set_lr(Worker(1), 0.5f));
  Ok(set_lr(Worker(2), 0.5f));
  Refused(set_lr(Worker(0), 9.f), "only a worker live at its step sends SET_LR");
  Refused(set_lr(kServerId, 9.f), "SET_LR");
  Push(1, 0, 1, One(1));
  Push(2, 0, 1, One(1));
  EXPECT_EQ(Pulled(0, 1), -3.f - 0.5f * 2.f);  // --elastic-lr linear: the two pushes at 0.5
}

}  // namespace
}  // namespace kv_server_test
}  // namespace tally
