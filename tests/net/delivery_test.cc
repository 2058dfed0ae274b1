// Delivery and authentication in the transport: exactly once and in order over a transport
// that loses, repeats and reorders (TALLY_TEST_FAULTS), and the secure transport admitting only the job's
// members, each only under its own name.
#include <cstring>
#include <future>
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

// The acknowledgement listener hears of every drop of a node's unacknowledged bytes, on
// the thread that takes the acknowledgement in, naming the node: what wakes a send queue
// held back by its credit.
TEST(Delivery, AcknowledgementsThatFreeBytesCallTheListener) {
  auto a = NewReliableTransport(NewInProcTransport(), 1000);
  auto b = NewReliableTransport(NewInProcTransport(), 1000);
  int port_a = 0, port_b = 0;
  ASSERT_TRUE(a->Bind("ack-a", 0, &port_a).ok());
  ASSERT_TRUE(b->Bind("ack-b", 0, &port_b).ok());
  ASSERT_TRUE(a->Connect(0, "ack-b", port_b).ok());
  ASSERT_TRUE(b->Connect(1, "ack-a", port_a).ok());
  std::vector<std::pair<int, int64_t>> heard;  // (node, its unacknowledged bytes then)
  a->SetAckListener([&](int id) { heard.emplace_back(id, a->UnacknowledgedBytes(id)); });
  Message data = Numbered(1, 0);
  data.meta.set_command(wire::PUSH);
  data.meta.set_dtype(wire::F32);
  data.meta.add_slices()->set_length(1000);
  data.data.push_back(Tensor::Zeros({1000}, DType::kF32));
  ASSERT_TRUE(a->Send(0, data).ok());
  EXPECT_EQ(a->UnacknowledgedBytes(0), 4000);
  Message m;
  ASSERT_TRUE(b->Recv(&m, 5000).ok());
  for (int spin = 0; spin < 500 && heard.empty(); ++spin) {
    b->Recv(&m, 0).ok();  // lets b's acknowledgement go
    a->Recv(&m, 10).ok();
  }
  ASSERT_EQ(heard.size(), 1u) << "the acknowledgement was not heard";
  EXPECT_EQ(heard[0], std::make_pair(0, int64_t{0}));
  a->SetAckListener(nullptr);
  ASSERT_TRUE(a->Send(0, data).ok());
  ASSERT_TRUE(b->Recv(&m, 5000).ok());
  for (int spin = 0; spin < 100 && a->UnacknowledgedBytes(0) > 0; ++spin) {
    b->Recv(&m, 0).ok();
    a->Recv(&m, 10).ok();
  }
  EXPECT_EQ(a->UnacknowledgedBytes(0), 0);
  EXPECT_EQ(heard.size(), 1u) << "a listener replaced by null is still called";
}

// A node that closes right after taking a message in (a node leaving on the scheduler's
// SHUTDOWN) still acknowledges it: otherwise the sender keeps it and sends it again to a
// node that is gone, which a loaded machine showed as resends in a healthy job.
TEST(Delivery, ClosingAcknowledgesWhatWasDelivered) {
  for (int round = 0; round < 5; ++round) {
    auto a = NewReliableTransport(NewInProcTransport(), 600000);  // a never resends here
    auto b = NewReliableTransport(NewInProcTransport(), 600000);
    int port_a = 0, port_b = 0;
    const std::string name = "close-" + std::to_string(round);
    ASSERT_TRUE(a->Bind(name + "a", 0, &port_a).ok());
    ASSERT_TRUE(b->Bind(name + "b", 0, &port_b).ok());
    ASSERT_TRUE(a->Connect(0, name + "b", port_b).ok());
    ASSERT_TRUE(b->Connect(1, name + "a", port_a).ok());
    ASSERT_TRUE(a->Send(0, Numbered(1, 0)).ok());
    Message m;
    ASSERT_TRUE(b->Recv(&m, 5000).ok());
    b->Close();
    for (int spin = 0; spin < 1000 && a->Unacknowledged() > 0; ++spin) a->Recv(&m, 10).ok();
    EXPECT_EQ(a->Unacknowledged(), 0u) << "round " << round << ": the closed node never acknowledged";
    EXPECT_EQ(a->Counters().resent, 0);
  }
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
JobAuth Member(const std::string& secret, const std::string& name) { return JobAuth{secret, name, JobNames{1, 1}}; }

// Receives on another thread, as a node's receiving thread does: the first Send to a
// secure peer waits for that peer to answer the handshake.
std::future<std::pair<Status, Message>> RecvAsync(Transport* t, int timeout_ms) {
  return std::async(std::launch::async, [t, timeout_ms] {
    Message m;
    Status s = t->Recv(&m, timeout_ms);
    return std::make_pair(s, std::move(m));
  });
}

TEST(Secure, MembersAreAuthenticatedByNameAndOutsidersNeverDeliver) {
  const std::string secret(32, '\x11'), other(32, '\x22');
  JobAuth server_auth = Member(secret, "server 0"), worker_auth = Member(secret, "worker 0"),
          impostor_auth = Member(secret, "scheduler"), outsider_auth = Member(other, "worker 0");
  auto server = NewZmqTransport(2000, &server_auth);
  int port = 0;
  ASSERT_TRUE(server->Bind("127.0.0.1", 0, &port).ok());

  auto worker = NewZmqTransport(2000, &worker_auth);
  ASSERT_TRUE(worker->Connect(1, "127.0.0.1", port).ok());
  auto got = RecvAsync(server.get(), 5000);
  ASSERT_TRUE(worker->Send(1, Numbered(2, 5)).ok());
  auto [s5, m5] = got.get();
  ASSERT_TRUE(s5.ok()) << s5;
  EXPECT_EQ(m5.peer, "worker 0");
  EXPECT_EQ(m5.meta.step(), 5);

  // A member that claims another member's id: dropped.
  ASSERT_TRUE(worker->Send(1, Numbered(0, 6)).ok());
  // Another member's name, used as itself: fine; the job's scheduler.
  auto scheduler = NewZmqTransport(2000, &impostor_auth);
  ASSERT_TRUE(scheduler->Connect(1, "127.0.0.1", port).ok());
  got = RecvAsync(server.get(), 5000);
  ASSERT_TRUE(scheduler->Send(1, Numbered(0, 7)).ok());
  auto [s7, m7] = got.get();
  ASSERT_TRUE(s7.ok()) << s7;
  EXPECT_EQ(m7.peer, "scheduler");
  EXPECT_EQ(m7.meta.step(), 7) << "the forged message of step 6 must not arrive";

  // A process with another job's secret, and a plain one: nothing of theirs arrives. The
  // outsider learns that the server does not share its secret.
  got = RecvAsync(server.get(), 1500);
  auto outsider = NewZmqTransport(1000, &outsider_auth);
  ASSERT_TRUE(outsider->Connect(1, "127.0.0.1", port).ok());
  Status refused = outsider->Send(1, Numbered(2, 8));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("does not hold this job's secret"), std::string::npos) << refused;
  auto plain = NewZmqTransport(200);
  ASSERT_TRUE(plain->Connect(1, "127.0.0.1", port).ok());
  plain->Send(1, Numbered(2, 9)).ok();
  auto [s_none, m_none] = got.get();
  EXPECT_FALSE(s_none.ok()) << "got step " << m_none.meta.step() << " from " << m_none.peer;
  EXPECT_GE(server->Counters().rejected, 2) << "the forged and the plain message";

  // Still serving its members.
  got = RecvAsync(server.get(), 5000);
  ASSERT_TRUE(worker->Send(1, Numbered(2, 10)).ok());
  auto [s10, m10] = got.get();
  ASSERT_TRUE(s10.ok()) << s10;
  EXPECT_EQ(m10.meta.step(), 10);
}

// Two nodes whose receiving threads each send to the other first (an acknowledgement, say)
// before either has answered a handshake, then go back to receiving: each answers the
// other's HELLO while it waits for its own WELCOME, so neither waits out its timeout.
TEST(Secure, NodesThatHandshakeWithEachOtherAtOnceBothGetThrough) {
  const std::string secret(32, '\x33');
  JobAuth a_auth = Member(secret, "server 0"), b_auth = Member(secret, "worker 0");
  auto a = NewZmqTransport(3000, &a_auth), b = NewZmqTransport(3000, &b_auth);
  int a_port = 0, b_port = 0;
  ASSERT_TRUE(a->Bind("127.0.0.1", 0, &a_port).ok());
  ASSERT_TRUE(b->Bind("127.0.0.1", 0, &b_port).ok());
  ASSERT_TRUE(a->Connect(2, "127.0.0.1", b_port).ok());
  ASSERT_TRUE(b->Connect(1, "127.0.0.1", a_port).ok());
  struct Outcome {
    Status sent, received;
    Message got;
  };
  auto receiving_thread = [](Transport* self, int peer, int from, int64_t step) {
    Outcome o;
    o.sent = self->Send(peer, Numbered(from, step));
    o.received = self->Recv(&o.got, 3000);
    return o;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto at_a = std::async(std::launch::async, receiving_thread, a.get(), 2, 1, 1);
  auto at_b = std::async(std::launch::async, receiving_thread, b.get(), 1, 2, 2);
  Outcome oa = at_a.get(), ob = at_b.get();
  ASSERT_TRUE(oa.sent.ok()) << oa.sent;
  ASSERT_TRUE(ob.sent.ok()) << ob.sent;
  ASSERT_TRUE(oa.received.ok()) << oa.received;
  ASSERT_TRUE(ob.received.ok()) << ob.received;
  EXPECT_EQ(oa.got.meta.step(), 2);
  EXPECT_EQ(ob.got.meta.step(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "a handshake waited out its timeout";
}

TEST(Secure, NamesFollowTheNodeTable) {
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
