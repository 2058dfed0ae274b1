// Delivery and authentication in the transport: exactly once and in order over a transport
// that loses, repeats and reorders (TALLY_TEST_FAULTS), and CURVE admitting only the job's
// members, each only under its own name.
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "net/cluster.h"
#include "net/transport.h"

namespace tally {
namespace {

Message Numbered(int sender, int64_t step) {
  Message m;
  m.meta.set_command(wire::HEARTBEAT);
  m.meta.set_sender_id(sender);
  m.meta.set_step(step);
  return m;
}

// Node 1 sends `count` messages to node 0 through reliable-over-faulty in-process
// transports; node 0 must see steps 0..count-1 once each, in order.
std::vector<int64_t> SendThroughFaults(const FaultSpec& faults, int count, int64_t* unacked) {
  auto a = NewReliableTransport(NewFaultyTransport(NewInProcTransport(), faults), 20);
  auto b = NewReliableTransport(NewFaultyTransport(NewInProcTransport(), faults), 20);
  int port_a = 0, port_b = 0;
  EXPECT_TRUE(a->Bind("fault-a", 0, &port_a).ok());
  EXPECT_TRUE(b->Bind("fault-b", 0, &port_b).ok());
  EXPECT_TRUE(a->Connect(0, "fault-b", port_b).ok());
  EXPECT_TRUE(b->Connect(1, "fault-a", port_a).ok());
  std::vector<int64_t> got;
  for (int i = 0; i < count; ++i) {
    EXPECT_TRUE(a->Send(0, Numbered(1, i)).ok());
    Message m;
    // The sender's acknowledgements arrive through its Recv.
    while (a->Recv(&m, 0).ok()) ADD_FAILURE() << "node 0 sent nothing but acknowledgements";
    while (b->Recv(&m, 0).ok()) got.push_back(m.meta.step());
  }
  for (int spin = 0; spin < 500 && static_cast<int>(got.size()) < count; ++spin) {
    Message m;
    if (b->Recv(&m, 10).ok()) got.push_back(m.meta.step());
    while (a->Recv(&m, 0).ok()) {
    }
  }
  *unacked = static_cast<int64_t>(a->Unacknowledged());
  return got;
}

TEST(Delivery, ExactlyOnceAndInOrderDespiteLossRepeatsAndReordering) {
  FaultSpec faults;
  ASSERT_TRUE(ParseFaultSpec("drop=0.1,dup=0.1,reorder=0.1,delay_ms=0-3,seed=7", &faults).ok());
  int64_t unacked = 0;
  std::vector<int64_t> got = SendThroughFaults(faults, 300, &unacked);
  std::vector<int64_t> want(300);
  for (int i = 0; i < 300; ++i) want[i] = i;
  EXPECT_EQ(got, want);
}

TEST(Delivery, WithoutTheReliableLayerTheSameFaultsLoseAndRepeat) {
  // The check above can fail: the raw faulty transport really does lose and repeat.
  FaultSpec faults;
  ASSERT_TRUE(ParseFaultSpec("drop=0.1,dup=0.1,seed=7", &faults).ok());
  auto a = NewFaultyTransport(NewInProcTransport(), faults);
  auto b = NewInProcTransport();
  int port = 0;
  ASSERT_TRUE(b->Bind("raw-b", 0, &port).ok());
  ASSERT_TRUE(a->Connect(0, "raw-b", port).ok());
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(a->Send(0, Numbered(1, i)).ok());
  std::multiset<int64_t> got;
  Message m;
  while (b->Recv(&m, 50).ok()) got.insert(m.meta.step());
  std::set<int64_t> distinct(got.begin(), got.end());
  EXPECT_LT(distinct.size(), 300u) << "some were lost";
  EXPECT_GT(got.size(), distinct.size()) << "some came twice";
}

TEST(Delivery, FaultSpecErrorsNameTheVariableAndTheItem) {
  FaultSpec f;
  EXPECT_TRUE(ParseFaultSpec("", &f).ok());
  EXPECT_FALSE(f.any());
  ASSERT_TRUE(ParseFaultSpec("drop=0.01,dup=0.02,delay_ms=5-20,seed=9", &f).ok());
  EXPECT_DOUBLE_EQ(f.drop, 0.01);
  EXPECT_EQ(f.delay_min_ms, 5);
  EXPECT_EQ(f.delay_max_ms, 20);
  EXPECT_EQ(f.seed, 9u);
  for (const char* bad : {"drop=2", "drop", "loss=0.1", "delay_ms=20-5", "dup=-0.1", "seed=x"}) {
    Status s = ParseFaultSpec(bad, &f);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("TALLY_TEST_FAULTS"), std::string::npos) << s;
  }
}

// A job of 1 server and 1 worker: node 0 the scheduler, 1 the server, 2 the worker.
CurveAuth Member(const std::string& secret, const std::string& name) {
  CurveAuth a;
  a.secret = secret;
  a.self = name;
  a.job.num_servers = 1;
  a.job.num_workers = 1;
  return a;
}

TEST(Curve, MembersAreAuthenticatedByNameAndOutsidersNeverDeliver) {
  const std::string secret(32, '\x11'), other(32, '\x22');
  CurveAuth server_auth = Member(secret, "server 0"), worker_auth = Member(secret, "worker 0"),
            impostor_auth = Member(secret, "scheduler"), outsider_auth = Member(other, "worker 0");
  auto server = NewZmqTransport(2000, &server_auth);
  int port = 0;
  ASSERT_TRUE(server->Bind("127.0.0.1", 0, &port).ok());

  auto worker = NewZmqTransport(2000, &worker_auth);
  ASSERT_TRUE(worker->Connect(1, "127.0.0.1", port).ok());
  ASSERT_TRUE(worker->Send(1, Numbered(2, 5)).ok());
  Message got;
  ASSERT_TRUE(server->Recv(&got, 5000).ok());
  EXPECT_EQ(got.peer, "worker 0");
  EXPECT_EQ(got.meta.step(), 5);

  // A member that claims another member's id: dropped.
  ASSERT_TRUE(worker->Send(1, Numbered(0, 6)).ok());
  // Another member's key, used under its own name: fine; the job's scheduler.
  auto scheduler = NewZmqTransport(2000, &impostor_auth);
  ASSERT_TRUE(scheduler->Connect(1, "127.0.0.1", port).ok());
  ASSERT_TRUE(scheduler->Send(1, Numbered(0, 7)).ok());
  ASSERT_TRUE(server->Recv(&got, 5000).ok());
  EXPECT_EQ(got.peer, "scheduler");
  EXPECT_EQ(got.meta.step(), 7) << "the forged message of step 6 must not arrive";

  // A process with another job's secret, and a plain one: nothing of theirs arrives.
  auto outsider = NewZmqTransport(200, &outsider_auth);
  ASSERT_TRUE(outsider->Connect(1, "127.0.0.1", port).ok());
  outsider->Send(1, Numbered(2, 8)).ok();
  auto plain = NewZmqTransport(200);
  ASSERT_TRUE(plain->Connect(1, "127.0.0.1", port).ok());
  plain->Send(1, Numbered(2, 9)).ok();
  EXPECT_FALSE(server->Recv(&got, 1500).ok()) << "got step " << got.meta.step() << " from " << got.peer;

  // Still serving its members.
  ASSERT_TRUE(worker->Send(1, Numbered(2, 10)).ok());
  ASSERT_TRUE(server->Recv(&got, 5000).ok());
  EXPECT_EQ(got.meta.step(), 10);
}

TEST(Curve, NamesFollowTheNodeTable) {
  JobNames job{2, 3};
  EXPECT_EQ(job.Of(0), "scheduler");
  EXPECT_EQ(job.Of(1), "server 0");
  EXPECT_EQ(job.Of(2), "server 1");
  EXPECT_EQ(job.Of(3), "worker 0");
  EXPECT_EQ(job.Of(5), "worker 2");
  EXPECT_EQ(job.Of(6), "");
  EXPECT_EQ(job.Of(-1), "");
}

}  // namespace
}  // namespace tally
