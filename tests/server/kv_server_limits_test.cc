// What a worker may ask of a server (server.h, docs/wire.md "Steps"): requests of steps
// beyond the window after a slice's last step are refused and keep nothing; a worker
// that waits for its answers is held back instead of refused; INIT's chain and the
// scheduler's notices are checked before they are used. Each refusal is answered (or, from
// servers, logged) and counted, and changes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "server/server.h"
#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace kv_server_test {
namespace {

constexpr int64_t kFar = int64_t{1} << 40;

TEST_F(KVServerTest, RequestsOfFarStepsAreRefusedAndKeepNothing) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, false);
  Init(0, {1.f, 2.f});
  // Nothing applied yet (last step -1): steps up to 3 are inside the window.
  for (int64_t step : {int64_t{4}, int64_t{1000}, kFar}) {
    Message push = Request(wire::PUSH, Worker(0), step);
    AddSlice(&push, 0, 0, Values({1.f, 1.f}));
    Refused(std::move(push), "more than 4 after its last step applied, -1");
    Refused(PullRequest(1, 0, step, 2), "more than 4");
    Refused(PushPullRequest(0, 0, step, Values({1.f, 1.f})), "more than 4");
  }
  // A rollback names the step being gathered or the last one applied, nothing later.
  Refused(RollbackRequest(0, 0, 1, 2), "more than 1 after its last step applied");
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
  EXPECT_EQ(server_->NumRefused(), 10);
  // The job goes on as if none had come: w = [1, 2] - 1 * (1 + 1).
  Push(0, 0, 0, Values({1.f, 1.f}));
  Push(1, 0, 0, Values({1.f, 1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-1.f, 0.f}));
  // The window moves with the steps applied: step 4 is inside it now.
  EXPECT_TRUE(Send(PullRequest(1, 0, 4, 2)).empty());
  Refused(PullRequest(1, 0, 5, 2), "more than 4 after its last step applied, 0");
}

TEST_F(KVServerTest, AWorkerThatWaitsForItsPushesIsHeldBackNotRefused) {
  Make(2);
  Init(0, {0.f});
  // Worker 0 races ahead of worker 1: steps 0 and 1 are answered at once, step 2 once the
  // slice has applied step 0, so a worker that waits for its answers stays in the window.
  Push(0, 0, 0, Values({1.f}));
  Push(0, 0, 1, Values({2.f}));
  Message ahead = Request(wire::PUSH, Worker(0), 2);
  AddSlice(&ahead, 0, 0, Values({4.f}));
  const uint64_t ahead_id = ahead.meta.request_id();
  EXPECT_TRUE(Send(std::move(ahead)).empty()) << "answered only once step 0 is applied";
  auto answers = Send([&] {
    Message m = Request(wire::PUSH, Worker(1), 0);
    AddSlice(&m, 0, 0, Values({10.f}));
    return m;
  }());
  ASSERT_EQ(answers.size(), 2u);  // worker 1's push, and worker 0's step 2 held back
  EXPECT_EQ(answers[0].first, Worker(1));
  EXPECT_EQ(answers[1].first, Worker(0));
  EXPECT_EQ(answers[1].second.meta.request_id(), ahead_id);
  EXPECT_EQ(answers[1].second.meta.error(), "");
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  Push(1, 0, 1, Values({20.f}));
  Push(1, 0, 2, Values({40.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{44.f}));  // no optimizer: the sum
  EXPECT_EQ(server_->NumRefused(), 0);
}

TEST_F(KVServerTest, AsyncStepsCountFromTheNewestPushTaken) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/true);
  Init(1, {4.f}, /*async=*/true);
  // Workers need not agree under dist_async: worker 1 is far behind worker 0, and a push
  // that is not finite (not applied) still moves the window.
  for (int64_t step = 0; step < 10; ++step) Push(0, 1, step, Values({step == 9 ? NAN : 0.f}));
  Push(1, 1, 0, Values({1.f}));
  Push(0, 1, 13, Values({0.f}));
  Refused([&] {
    Message m = Request(wire::PUSH, Worker(1), 18);
    AddSlice(&m, 1, 0, Values({1.f}));
    return m;
  }(), "more than 4 after its last step taken, 13");
  Refused(PullRequest(1, 1, kFar, 1), "more than 4");
  EXPECT_EQ(Floats(server_->Value(1, 0)), (std::vector<float>{3.f}));
}

TEST_F(KVServerTest, AWorkerWaitsOnASliceWithAtMostSixteenRequests) {
  Make(2);
  Init(0, {0.f});
  for (int i = 0; i < KVServer::kMaxWaitingPerWorker; ++i) {
    EXPECT_TRUE(Send(PullRequest(1, 0, 0, 1)).empty());
  }
  EXPECT_EQ(server_->NumWaitingPulls(), KVServer::kMaxWaitingPerWorker);
  Refused(PullRequest(1, 0, 0, 1), "16 requests of this worker already wait");
  Message again = PullRequest(0, 0, 0, 1);  // another worker's have room of their own
  EXPECT_TRUE(Send(std::move(again)).empty());
  Push(0, 0, 0, Values({1.f}));
  auto answers = Send([&] {
    Message m = Request(wire::PUSH, Worker(1), 0);
    AddSlice(&m, 0, 0, Values({1.f}));
    return m;
  }());
  EXPECT_EQ(answers.size(), 1u + KVServer::kMaxWaitingPerWorker + 1);
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
}

// --server-replicas: an INIT names the chain its slices are on. One this server does not
// hold, or an absurd one, used to throw out of ServerChains::Holders and abort the server.
TEST(KVServerChainTest, AnInitOfAChainNotHeldHereIsRefusedNotAnAbort) {
  Sent sent;
  KVServer server(3, 2, [&](int id, Message m) {
    sent.push_back({id, std::move(m)});
    return Status::Ok();
  });
  server.SetReplication(/*my_rank=*/0, /*replicas=*/1);  // holds chains 0 ([0, 1]) and 2 ([2, 0])
  auto init = [&](int chain) {
    Message m;
    m.meta.set_command(wire::INIT);
    m.meta.set_sender_id(4);  // worker 0: nodes 1..3 are the servers
    m.meta.set_receiver_id(1);
    m.meta.set_request_id(static_cast<uint64_t>(chain + 100));
    m.meta.set_step(-1);
    m.meta.set_num_workers(2);
    m.meta.set_chain(chain);
    AddKeySlice(&m, 5, Values({1.f, 2.f}));
    sent.clear();
    server.Handle(std::move(m));
    EXPECT_EQ(sent.size(), 1u);
    return sent.empty() ? std::string("no answer") : sent[0].second.meta.error();
  };
  for (int chain : {99, -7, 0, 2, 1 << 30}) {
    const std::string error = init(chain);
    EXPECT_NE(error.find("chain " + std::to_string(chain)), std::string::npos) << chain << ": " << error;
    EXPECT_FALSE(server.Value(5, 0).defined()) << "chain " << chain << " kept its slice";
  }
  EXPECT_EQ(server.NumRefused(), 5);
  EXPECT_EQ(init(3), "");  // chain 2, server 0's backup copy
  EXPECT_TRUE(server.Value(5, 0).defined());
}

TEST(KVServerChainTest, WithoutReplicasAnInitNamesNoChain) {
  Sent sent;
  KVServer server(1, 1, [&](int id, Message m) {
    sent.push_back({id, std::move(m)});
    return Status::Ok();
  });
  Message m;
  m.meta.set_command(wire::INIT);
  m.meta.set_sender_id(2);
  m.meta.set_num_workers(1);
  m.meta.set_chain(1);
  AddKeySlice(&m, 5, Values({1.f}));
  server.Handle(std::move(m));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_NE(sent[0].second.meta.error().find("keeps no replicas"), std::string::npos) << sent[0].second.meta.error();
}

// A spare still receiving its chains holds the workers' requests (their ROLLBACKs), up to
// a bound: beyond it they are refused, not kept.
TEST(KVServerSpareTest, ASpareHoldsABoundedNumberOfRequests) {
  Sent sent;
  const NodeIds ids{2, 2, 1};  // servers 1-2, workers 3-4, the spare (rank 2) node 5
  KVServer spare(2, 2, [&](int id, Message m) {
    sent.push_back({id, std::move(m)});
    return Status::Ok();
  }, 1);
  spare.SetReplication(/*my_rank=*/2, /*replicas=*/1);
  Message lost;
  lost.meta.set_command(wire::SERVER_LOST);
  lost.meta.set_sender_id(kSchedulerId);
  for (int rank : {0, 2}) {  // server 0 is lost; the spare takes its chains
    wire::Node* n = lost.meta.add_nodes();
    n->set_role(wire::SERVER);
    n->set_rank(rank);
  }
  spare.Handle(std::move(lost));
  auto rollback = [&](uint64_t id) {
    Message m;
    m.meta.set_command(wire::ROLLBACK);
    m.meta.set_sender_id(ids.Worker(0));
    m.meta.set_request_id(id);
    wire::KeySlice* ks = m.meta.add_slices();
    ks->set_key(7);
    ks->set_length(3);
    spare.Handle(std::move(m));
  };
  for (uint64_t id = 1; id <= KVServer::kMaxHeld; ++id) rollback(id);
  EXPECT_TRUE(sent.empty()) << "held until the chains have come";
  rollback(KVServer::kMaxHeld + 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_NE(sent[0].second.meta.error().find("spare still receiving its chains"), std::string::npos);
  EXPECT_EQ(spare.NumRefused(), 1);
}

// SERVER_LOST is the scheduler's alone, and names servers of the job.
TEST_F(KVServerTest, AServerLostNoticeFromAWorkerOrOfNoServerIsIgnored) {
  Make(2);
  Init(0, {0.f});
  for (auto [sender, rank] : {std::pair<int, int>{Worker(0), 0}, {-2, 0}, {kSchedulerId, 7}, {kSchedulerId, -1}}) {
    Message lost = Request(wire::SERVER_LOST, sender);
    wire::Node* n = lost.meta.add_nodes();
    n->set_role(wire::SERVER);
    n->set_rank(rank);
    EXPECT_TRUE(Send(std::move(lost)).empty());
  }
  EXPECT_EQ(server_->NumRefused(), 4);
  // Server 0 is still this one: a push of the single worker's step applies.
  Push(0, 0, 0, Values({1.f}));
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
}

}  // namespace
}  // namespace kv_server_test
}  // namespace tally
