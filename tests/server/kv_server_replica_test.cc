// KVServer's chain replication (--server-replicas 1; server/kv_server_replica.cc): a primary
// (server 0, node 1) and its backup (server 1, node 2) fed hand-made messages from two
// workers (nodes 3 and 4); the test carries the servers' messages between them.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "server/server.h"
#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {
using kv_server_test::Floats;
using kv_server_test::Values;

constexpr int kPrimary = 1, kBackup = 2;
int Worker(int rank) { return 3 + rank; }

class ReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int rank : {0, 1}) {
      servers_[rank] = std::make_unique<KVServer>(2, 2, [this, rank](int to, Message m) {
        out_[rank].push_back({to, std::move(m)});
        return Status::Ok();
      });
      servers_[rank]->SetReplication(rank, 1);
      Message opt = Request(wire::SET_OPTIMIZER, Worker(0), 0);
      opt.meta.mutable_optimizer()->set_type("sgd");
      opt.meta.mutable_optimizer()->set_lr(0.5f);
      opt.meta.mutable_optimizer()->set_momentum(0.9f);
      opt.meta.mutable_optimizer()->set_rescale_grad(1.0f);
      Handle(rank, std::move(opt));
      Message init = Request(wire::INIT, Worker(0), -1);
      init.meta.set_chain(1);  // the slice is server 0's: server 1 is its backup
      AddSlice(&init, Values({1.f, 2.f, 3.f}));
      Handle(rank, std::move(init));
      out_[rank].clear();
    }
  }

  Message Request(wire::Command c, int sender, int64_t step) {
    Message m;
    m.meta.set_command(c);
    m.meta.set_sender_id(sender);
    m.meta.set_request_id(++next_id_);
    m.meta.set_step(step);
    m.meta.set_num_workers(2);
    return m;
  }
  static void AddSlice(Message* m, const Tensor& data) { kv_server_test::AddKeySlice(m, 7, data); }
  Message PushPull(int rank, int64_t step, const std::vector<float>& g) {
    Message m = Request(wire::PUSHPULL, Worker(rank), step);
    AddSlice(&m, Values(g));
    m.meta.set_pull_dtype(wire::F32);
    return m;
  }
  // Hands m to server `rank`, as its data handler would.
  void Handle(int rank, Message m) {
    m.meta.set_receiver_id(rank + 1);
    servers_[rank]->Handle(std::move(m));
  }
  // Takes what server `rank` sent to node `to`, leaving the rest.
  std::vector<Message> Take(int rank, int to) {
    return kv_server_test::TakeSentTo(&out_[rank], to);
  }
  // Carries server `from`'s messages to server `to` (REPLICATE one way, RESPONSE back).
  int Carry(int from, int to) {
    std::vector<Message> ms = Take(from, to + 1);
    for (Message& m : ms) {
      m.meta.set_sender_id(from + 1);
      Handle(to, std::move(m));
    }
    return static_cast<int>(ms.size());
  }

  std::unique_ptr<KVServer> servers_[2];
  kv_server_test::Sent out_[2];
  uint64_t next_id_ = 0;
};

TEST_F(ReplicaTest, AStepIsAnsweredOnceTheBackupHasItAndBothHoldTheSameBits) {
  for (int64_t step = 0; step < 3; ++step) {
    Handle(0, PushPull(0, step, {0.5f, -1.f, 0.25f}));
    Handle(0, PushPull(1, step, {0.125f, 3.f, -0.75f}));
    // Applied on the primary, forwarded, and nothing answered before the backup has it.
    EXPECT_EQ(servers_[0]->AppliedStep(7, 0), step);
    ASSERT_EQ(out_[0].size(), 1u);
    for (auto& [id, m] : out_[0]) {
      ASSERT_EQ(id, kBackup) << "answered before the backup acknowledged";
      EXPECT_EQ(m.meta.command(), wire::REPLICATE);
    }
    ASSERT_EQ(Carry(0, 1), 1);
    EXPECT_EQ(servers_[1]->AppliedStep(7, 0), step);
    ASSERT_EQ(Carry(1, 0), 1);  // the acknowledgement
    std::vector<Message> a0 = Take(0, Worker(0));
    ASSERT_EQ(a0.size(), 1u);
    EXPECT_EQ(Take(0, Worker(1)).size(), 1u);
    EXPECT_TRUE(out_[0].empty());
    const Tensor p = servers_[0]->Value(7, 0), b = servers_[1]->Value(7, 0);
    EXPECT_EQ(std::memcmp(p.raw_data(), b.raw_data(), p.nbytes()), 0) << "step " << step;
    EXPECT_EQ(Floats(a0[0].data[0]), Floats(p));
  }
}

TEST_F(ReplicaTest, TheBackupUsesThePrimarysLearningRate) {
  // The backup's own SET_LR of the step has not come (it travels from worker 0 apart).
  Message lr = Request(wire::SET_LR, Worker(0), 0);
  lr.meta.set_lr(0.125f);
  Handle(0, std::move(lr));
  out_[0].clear();
  Handle(0, PushPull(0, 0, {1.f, 1.f, 1.f}));
  Handle(0, PushPull(1, 0, {1.f, 1.f, 1.f}));
  ASSERT_EQ(Carry(0, 1), 1);
  const Tensor p = servers_[0]->Value(7, 0), b = servers_[1]->Value(7, 0);
  EXPECT_EQ(Floats(p), (std::vector<float>{0.75f, 1.75f, 2.75f}));  // 0.125 * the sum, 2
  EXPECT_EQ(std::memcmp(p.raw_data(), b.raw_data(), p.nbytes()), 0);
}

TEST_F(ReplicaTest, APushWaitsForTheBackupAndALostBackupReleasesTheAnswers) {
  Message push = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&push, Values({1.f, 1.f, 1.f}));
  Handle(0, std::move(push));
  EXPECT_TRUE(Take(0, Worker(0)).empty()) << "a replicated push is answered once its step is visible";
  Handle(0, PushPull(1, 0, {1.f, 1.f, 1.f}));
  EXPECT_EQ(Take(0, kBackup).size(), 1u);  // forwarded; never acknowledged: the backup dies
  EXPECT_TRUE(Take(0, Worker(1)).empty());
  Message lost = Request(wire::SERVER_LOST, kSchedulerId, 0);
  wire::Node* node = lost.meta.add_nodes();
  node->set_role(wire::SERVER);
  node->set_rank(1);
  Handle(0, std::move(lost));
  EXPECT_EQ(Take(0, Worker(0)).size(), 1u);
  EXPECT_EQ(Take(0, Worker(1)).size(), 1u);
  // With no backup left, the next step is answered at once.
  Handle(0, PushPull(0, 1, {1.f, 1.f, 1.f}));
  Handle(0, PushPull(1, 1, {1.f, 1.f, 1.f}));
  EXPECT_EQ(Take(0, kBackup).size(), 0u);
  EXPECT_EQ(Take(0, Worker(0)).size(), 1u);
}

TEST_F(ReplicaTest, ThePromotedBackupCountsAResentPushOnce) {
  Handle(0, PushPull(0, 0, {1.f, 1.f, 1.f}));
  Handle(0, PushPull(1, 0, {2.f, 2.f, 2.f}));
  ASSERT_EQ(Carry(0, 1), 1);  // the primary dies here, its answers unsent
  const std::vector<float> after = Floats(servers_[1]->Value(7, 0));
  // The workers send their step-0 requests again, to the backup: answered with the values
  // after step 0, which is not applied twice.
  Handle(1, PushPull(0, 0, {1.f, 1.f, 1.f}));
  std::vector<Message> again = Take(1, Worker(0));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(Floats(again[0].data[0]), after);
  EXPECT_EQ(servers_[1]->AppliedStep(7, 0), 0);
  EXPECT_EQ(servers_[1]->NumDuplicates(), 1);
}

}  // namespace
}  // namespace tally
