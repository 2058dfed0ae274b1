// Transport::Forget (net/transport.h): a node that a new process takes over (--elastic: a
// worker joining at a rank that left) is numbered from 1 again both ways; without Forget
// the new process's messages would be dropped as repeats of the old one's.
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

// Everything `to` delivers within a generous bound until it has `count`; `from` takes its
// acknowledgements meanwhile.
std::vector<int64_t> Drain(Transport* to, Transport* from, size_t count) {
  std::vector<int64_t> got;
  for (int spin = 0; spin < 2000 && got.size() < count; ++spin) {
    Message m;
    if (to->Recv(&m, 10).ok()) got.push_back(m.meta.step());
    while (from->Recv(&m, 0).ok()) {
    }
  }
  return got;
}

TEST(Forget, ANewProcessAtAnOldIdIsNumberedFromOneBothWays) {
  for (bool forget : {true, false}) {
    auto server = NewReliableTransport(NewInProcTransport(), 20);
    auto old_worker = NewReliableTransport(NewInProcTransport(), 20);
    const std::string tag = forget ? "forget" : "remember";
    int server_port = 0, old_port = 0, new_port = 0;
    ASSERT_TRUE(server->Bind("forget-server-" + tag, 0, &server_port).ok());
    ASSERT_TRUE(old_worker->Bind("forget-old-" + tag, 0, &old_port).ok());
    ASSERT_TRUE(old_worker->Connect(0, "forget-server-" + tag, server_port).ok());
    ASSERT_TRUE(server->Connect(1, "forget-old-" + tag, old_port).ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(old_worker->Send(0, Numbered(1, i)).ok());
    EXPECT_EQ(Drain(server.get(), old_worker.get(), 5).size(), 5u);
    old_worker.reset();  // killed: a message to it fails, and is kept unacknowledged
    server->Send(1, Numbered(0, 100)).ok();
    EXPECT_EQ(server->Unacknowledged(), 1u);

    auto new_worker = NewReliableTransport(NewInProcTransport(), 20);
    ASSERT_TRUE(new_worker->Bind("forget-new-" + tag, 0, &new_port).ok());
    ASSERT_TRUE(new_worker->Connect(0, "forget-server-" + tag, server_port).ok());
    if (forget) server->Forget(1);
    ASSERT_TRUE(server->Connect(1, "forget-new-" + tag, new_port).ok());
    for (int i = 10; i < 13; ++i) ASSERT_TRUE(new_worker->Send(0, Numbered(1, i)).ok());
    const std::vector<int64_t> got = Drain(server.get(), new_worker.get(), 3);
    if (!forget) {
      EXPECT_TRUE(got.empty()) << "without Forget, repeats of the old process's numbers";
      continue;
    }
    EXPECT_EQ(got, (std::vector<int64_t>{10, 11, 12}));
    EXPECT_EQ(server->Unacknowledged(), 0u) << "what the old process never acknowledged is dropped";
    ASSERT_TRUE(server->Send(1, Numbered(0, 200)).ok());
    EXPECT_EQ(Drain(new_worker.get(), server.get(), 1), (std::vector<int64_t>{200}));
  }
}

}  // namespace
}  // namespace tally
