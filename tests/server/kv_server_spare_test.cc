// A spare server taking a lost server's place (--spare-servers; server/kv_server_spare.cc):
// servers 0 and 1 (nodes 1, 2) hold server 0's slice (chain 0), workers 0 and 1 are nodes 3
// and 4, and the spare, server 2, is node 5 (spares' ids follow the workers'). A fourth
// KVServer with no replicas, fed the same pushes, gives the bits every holder must have.
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

constexpr int kServers = 2, kWorkers = 2, kSpares = 1;
constexpr int kSpare = 2;  // the spare's rank
constexpr int kRef = 3;    // the reference server's index here
const NodeIds kIds{kServers, kWorkers, kSpares};

class SpareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 4; ++i) {
      servers_[i] = std::make_unique<KVServer>(kServers, kWorkers, [this, i](int to, Message m) {
        out_[i].push_back({to, std::move(m)});
        return Status::Ok();
      }, kSpares);
      if (i != kRef) servers_[i]->SetReplication(i, 1);
      Message opt = Request(wire::SET_OPTIMIZER, 0, 0);
      opt.meta.mutable_optimizer()->set_type(optimizer_);
      opt.meta.mutable_optimizer()->set_lr(0.5f);
      opt.meta.mutable_optimizer()->set_momentum(0.9f);
      opt.meta.mutable_optimizer()->set_rescale_grad(1.0f);
      Handle(i, std::move(opt));
      if (i == kSpare) continue;  // a spare holds nothing at first
      Message init = Request(wire::INIT, 0, -1);
      if (i != kRef) init.meta.set_chain(1);
      AddSlice(&init, Values({1.f, 2.f, 3.f}));
      Handle(i, std::move(init));
    }
    for (auto& o : out_) o.clear();
  }

  Message Request(wire::Command c, int worker, int64_t step) {
    Message m;
    m.meta.set_command(c);
    m.meta.set_sender_id(kIds.Worker(worker));
    m.meta.set_request_id(++next_id_);
    m.meta.set_step(step);
    m.meta.set_num_workers(kWorkers);
    return m;
  }
  static void AddSlice(Message* m, const Tensor& data) { kv_server_test::AddKeySlice(m, 7, data); }
  Message PushPull(int worker, int64_t step, const std::vector<float>& g) {
    Message m = Request(wire::PUSHPULL, worker, step);
    AddSlice(&m, Values(g, push_dtype_));
    m.meta.set_pull_dtype(wire::F32);
    return m;
  }
  Message Lost(int rank, int spare) {
    Message m;
    m.meta.set_command(wire::SERVER_LOST);
    m.meta.set_sender_id(kSchedulerId);
    for (int r : {rank, spare}) {
      if (r < 0) continue;
      wire::Node* n = m.meta.add_nodes();
      n->set_role(wire::SERVER);
      n->set_rank(r);
      n->set_id(kIds.Server(r));
    }
    return m;
  }
  // Server i (index kRef: the reference) takes m, as its data handler would.
  void Handle(int i, Message m) {
    m.meta.set_receiver_id(i == kRef ? 1 : kIds.Server(i));
    servers_[i]->Handle(std::move(m));
  }
  // Takes what server i sent to node `to`.
  std::vector<Message> Take(int i, int to) {
    return kv_server_test::TakeSentTo(&out_[i], to);
  }
  // Carries server `from`'s messages to server `to`.
  int Carry(int from, int to) {
    std::vector<Message> ms = Take(from, kIds.Server(to));
    for (Message& m : ms) {
      m.meta.set_sender_id(kIds.Server(from));
      Handle(to, std::move(m));
    }
    return static_cast<int>(ms.size());
  }
  // Both workers' step on server i and on the reference; carries the replication between
  // i and `backup` (-1: none) both ways.
  void Step(int i, int backup, int64_t step) {
    const std::vector<float> g0 = {0.5f * (step + 1), -1.f, 0.25f}, g1 = {0.125f, 3.f / (step + 1), -0.75f};
    for (int s : {i, kRef}) {
      Handle(s, PushPull(0, step, g0));
      Handle(s, PushPull(1, step, g1));
    }
    if (backup >= 0) {
      ASSERT_EQ(Carry(i, backup), 1) << "step " << step;
      ASSERT_EQ(Carry(backup, i), 1) << "step " << step;
    }
    EXPECT_EQ(Take(i, kIds.Worker(0)).size(), 1u) << "step " << step;
    EXPECT_EQ(Take(i, kIds.Worker(1)).size(), 1u) << "step " << step;
    out_[kRef].clear();
  }
  void ExpectSameBits(int i) {
    const Tensor a = servers_[i]->Value(7, 0), b = servers_[kRef]->Value(7, 0);
    ASSERT_TRUE(a.defined()) << "server " << i;
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0)
        << "server " << i << ": " << ::testing::PrintToString(Floats(a)) << " vs " << ::testing::PrintToString(Floats(b));
    EXPECT_EQ(servers_[i]->AppliedStep(7, 0), servers_[kRef]->AppliedStep(7, 0));
  }
  // Steps 0 and 1 on servers 0 and 1; server 1 lost and the spare in its place; step 2;
  // server 0 lost; steps 3 and 4 on the spare alone: the same bits as the reference.
  void TakeOverAndOutlive();
  // Steps 0 and 1; server 1 lost; a worker rolls step 1 back before the spare has the state:
  // the rollback waits for it, and the undo copy (values and optimizer state) came with it.
  void RollBackWhileTakingOver();
  Message Rollback(int worker, int64_t step) {
    Message m = Request(wire::ROLLBACK, worker, step);
    AddSlice(&m, Values({0.f, 0.f, 0.f}));
    m.data.clear();  // a rollback names its slices and sends no data
    return m;
  }
  // Server 0 and the spare hold the reference's bits, and still do after steps `step` and
  // `step` + 1 on server 0 with the spare as its backup: their momentum agrees too.
  void AgreeThroughTwoSteps(int64_t step) {
    ExpectSameBits(0);
    ExpectSameBits(kSpare);
    Step(0, kSpare, step);
    Step(0, kSpare, step + 1);
    ExpectSameBits(kSpare);
  }
  bool SentReady(int i) {
    for (Message& m : Take(i, kSchedulerId)) {
      if (m.meta.command() == wire::REPLICA_READY) return true;
    }
    return false;
  }

  DType push_dtype_ = DType::kF32;  // the workers' gradients on the wire
  const char* optimizer_ = "nag";   // SetUp's SET_OPTIMIZER
  std::unique_ptr<KVServer> servers_[4];
  kv_server_test::Sent out_[4];
  uint64_t next_id_ = 0;
};

TEST_F(SpareTest, TheSpareTakesTheStateThenTheStepsAndOutlivesTheServerThatSentIt) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    TearDown();
    SetUp();
    push_dtype_ = dtype;
    TakeOverAndOutlive();
  }
}

void SpareTest::TakeOverAndOutlive() {
  Step(0, 1, 0);
  Step(0, 1, 1);
  servers_[0]->Handle(Lost(1, kSpare));
  // The state and the end markers of chains 0 and 1 (server 0 serves both now) reach the
  // spare before its own notice: they wait for that.
  EXPECT_EQ(Carry(0, kSpare), 3);
  EXPECT_FALSE(servers_[kSpare]->Value(7, 0).defined());
  servers_[kSpare]->Handle(Lost(1, kSpare));
  EXPECT_TRUE(SentReady(kSpare));
  ExpectSameBits(kSpare);
  // A step after the hand-over reaches the spare as a backup, and the momentum came too.
  Step(0, kSpare, 2);
  ExpectSameBits(kSpare);
  // The last of the first servers is lost: the spare serves alone.
  servers_[kSpare]->Handle(Lost(0, -1));
  Step(kSpare, -1, 3);
  Step(kSpare, -1, 4);
  ExpectSameBits(kSpare);
}

TEST_F(SpareTest, WorkersRequestsWaitForTheStateAndTheUndoCopyComesWithIt) { RollBackWhileTakingOver(); }

// Every rule's whole state (Adam's mean, variance and update count; LARS's momentum and
// previous lr; ...) and its undo copy reach the spare, which goes on with the reference's bits.
TEST_F(SpareTest, EveryOptimizersWholeStateReachesTheSpare) {
  for (const char* type : {"adam", "adamw", "adagrad", "rmsprop", "signum", "lars", "lamb"}) {
    SCOPED_TRACE(type);
    optimizer_ = type;
    TearDown();
    SetUp();
    TakeOverAndOutlive();
    TearDown();
    SetUp();
    RollBackWhileTakingOver();
  }
}

void SpareTest::RollBackWhileTakingOver() {
  Step(0, 1, 0);
  Step(0, 1, 1);
  servers_[kSpare]->Handle(Lost(1, kSpare));
  servers_[0]->Handle(Lost(1, kSpare));
  // A worker rolls step 1 back (another key was not finite), its copy for the spare first.
  Handle(kSpare, Rollback(0, 1));
  EXPECT_TRUE(out_[kSpare].empty()) << "answered before the state came";
  EXPECT_EQ(Carry(0, kSpare), 3);
  EXPECT_TRUE(SentReady(kSpare));
  EXPECT_EQ(Take(kSpare, kIds.Worker(0)).size(), 1u);  // the held rollback, answered now
  for (int i : {0, kRef}) {
    Handle(i, Rollback(0, 1));
    EXPECT_EQ(Take(i, kIds.Worker(0)).size(), 1u);
  }
  // Server 0 sends the rolled-back slice again, which the spare, rolled back already, has.
  EXPECT_EQ(Carry(0, kSpare), 1);
  AgreeThroughTwoSteps(2);
}

TEST_F(SpareTest, ARollbackTheSpareWasNotSentReachesItWithTheStateAgain) {
  Step(0, 1, 0);
  Step(0, 1, 1);
  for (int i : {0, kSpare}) servers_[i]->Handle(Lost(1, kSpare));
  // Both workers' rollbacks of step 1 left before they knew of the spare: server 0 alone
  // has them, after it sent the spare the state of step 1.
  for (int i : {0, kRef}) {
    for (int w : {0, 1}) Handle(i, Rollback(w, 1));
  }
  out_[kRef].clear();
  for (int w : {0, 1}) EXPECT_EQ(Take(0, kIds.Worker(w)).size(), 1u);
  // The state of step 1, both chains' end markers, then the rolled-back slice again (once:
  // the second rollback changed nothing).
  EXPECT_EQ(Carry(0, kSpare), 4);
  EXPECT_TRUE(SentReady(kSpare));
  AgreeThroughTwoSteps(2);
}

TEST_F(SpareTest, AStepOfTheLostPrimaryThatCameLateReachesTheSpare) {
  // Server 1 serves chain 1 in a real job; here server 0 is lost and server 1, its backup,
  // takes chain 0 over while the step server 0 forwarded last is still on its way.
  Step(0, 1, 0);
  Handle(0, PushPull(0, 1, {1.f, 1.f, 1.f}));
  Handle(0, PushPull(1, 1, {2.f, 2.f, 2.f}));
  std::vector<Message> late = Take(0, kIds.Server(1));
  ASSERT_EQ(late.size(), 1u);
  for (int i : {1, kSpare}) servers_[i]->Handle(Lost(0, kSpare));
  EXPECT_EQ(Carry(1, kSpare), 3);  // the state after step 0, and both chains' end markers
  EXPECT_TRUE(SentReady(kSpare));
  late[0].meta.set_sender_id(kIds.Server(0));
  Handle(1, std::move(late[0]));  // applied on server 1, and forwarded to the spare
  EXPECT_EQ(Carry(1, kSpare), 1);
  Handle(kRef, PushPull(0, 1, {1.f, 1.f, 1.f}));
  Handle(kRef, PushPull(1, 1, {2.f, 2.f, 2.f}));
  ExpectSameBits(1);
  ExpectSameBits(kSpare);
}

}  // namespace
}  // namespace tally
