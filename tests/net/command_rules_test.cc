// Who may send what (net/command_rules.h): the table itself, and a live job (a scheduler,
// a server and two workers as threads) into which a rogue, speaking as worker 1 or with ids
// that are no node's, sends what only the scheduler or a server may send. Over the
// authenticated ZeroMQ transport the rogue holds the job's secret and proves the name
// "worker 1" on connections of its own. Every node refuses and counts each message, and
// the job ends well.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "net/cluster.h"
#include "net/command_rules.h"
#include "scheduler/scheduler.h"
#include "tests/local_job.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

const NodeIds kIds{/*num_servers=*/2, /*num_workers=*/2, /*spare_servers=*/1};  // 1-2, 3-4, spare 5

wire::Meta MetaOf(wire::Command command, int sender) {
  wire::Meta m;
  m.set_command(command);
  m.set_sender_id(sender);
  return m;
}

bool Allowed(wire::Role to, wire::Command command, int sender) {
  return CheckCommandSender(kIds, to, MetaOf(command, sender)).ok();
}

TEST(CommandRules, TheSchedulersNoticesComeFromTheSchedulerAlone) {
  for (wire::Command c : {wire::NODE_TABLE, wire::BARRIER_DONE, wire::SHUTDOWN, wire::NODE_DEAD, wire::SERVER_LOST}) {
    for (wire::Role to : {wire::SERVER, wire::WORKER}) {
      EXPECT_TRUE(Allowed(to, c, kSchedulerId)) << wire::Command_Name(c);
      for (int sender : {1, 3, 4, 5, -1, -2, 6, 1 << 30}) {
        EXPECT_FALSE(Allowed(to, c, sender)) << wire::Command_Name(c) << " from " << sender;
      }
    }
    EXPECT_FALSE(Allowed(wire::SCHEDULER, c, 3)) << "nobody sends the scheduler its own notices";
  }
  Status why = CheckCommandSender(kIds, wire::WORKER, MetaOf(wire::SHUTDOWN, 4));
  EXPECT_EQ(why.message(), "SHUTDOWN from node 4 (worker 1) to a worker: only the scheduler sends it");
}

TEST(CommandRules, RequestsComeFromWorkersAndAnswersFromServers) {
  for (wire::Command c : {wire::INIT, wire::PUSH, wire::PULL, wire::PUSHPULL, wire::ROLLBACK, wire::SET_LR,
                          wire::SET_OPTIMIZER}) {
    EXPECT_TRUE(Allowed(wire::SERVER, c, 3));
    EXPECT_TRUE(Allowed(wire::SERVER, c, 4));
    for (int sender : {0, 1, 2, 5, -1, -3, 7}) EXPECT_FALSE(Allowed(wire::SERVER, c, sender)) << sender;
    EXPECT_FALSE(Allowed(wire::WORKER, c, 3)) << "a worker serves no requests";
  }
  for (wire::Command c : {wire::REPLICATE, wire::REPLICA_STATE}) {
    for (int server : {1, 2, 5}) EXPECT_TRUE(Allowed(wire::SERVER, c, server));
    for (int other : {0, 3, 4, -1}) EXPECT_FALSE(Allowed(wire::SERVER, c, other));
  }
  for (wire::Role to : {wire::SERVER, wire::WORKER}) {
    EXPECT_TRUE(Allowed(to, wire::RESPONSE, 2));
    EXPECT_TRUE(Allowed(to, wire::RESPONSE, 5));
    EXPECT_FALSE(Allowed(to, wire::RESPONSE, 3)) << "a worker's fake answer";
    EXPECT_FALSE(Allowed(to, wire::RESPONSE, 0));
  }
}

TEST(CommandRules, TheSchedulerHearsMembersAndOnlyRegisterHasNoId) {
  EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::REGISTER, -1));
  EXPECT_FALSE(Allowed(wire::SCHEDULER, wire::REGISTER, 3));
  EXPECT_FALSE(Allowed(wire::SERVER, wire::REGISTER, -1));
  EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::WORKER_DONE, 3));
  EXPECT_FALSE(Allowed(wire::SCHEDULER, wire::WORKER_DONE, 1)) << "a server's WORKER_DONE would end the job early";
  EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::REPLICA_READY, 5));
  EXPECT_FALSE(Allowed(wire::SCHEDULER, wire::REPLICA_READY, 3));
  for (int sender : {1, 3, 5}) {
    EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::HEARTBEAT, sender));
    EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::BARRIER, sender));
  }
  for (wire::Role to : {wire::SCHEDULER, wire::SERVER, wire::WORKER}) {
    for (int sender : {-1, -2, -100, 6}) {
      for (int c = 0; c < 40; ++c) {
        if (c == wire::REGISTER && sender == -1 && to == wire::SCHEDULER) continue;
        EXPECT_FALSE(Allowed(to, static_cast<wire::Command>(c), sender)) << c << " from " << sender;
      }
    }
  }
  EXPECT_FALSE(Allowed(wire::SERVER, static_cast<wire::Command>(99), 3));
}

TEST(CommandRules, NoticesNameNodesOfTheJob) {
  wire::Meta lost = MetaOf(wire::SERVER_LOST, kSchedulerId);
  auto add = [&](int rank) {
    wire::Node* n = lost.add_nodes();
    n->set_role(wire::SERVER);
    n->set_rank(rank);
  };
  EXPECT_FALSE(CheckNoticeFields(kIds, lost).ok()) << "names no server";
  add(1);
  EXPECT_TRUE(CheckNoticeFields(kIds, lost).ok());
  add(2);
  EXPECT_TRUE(CheckNoticeFields(kIds, lost).ok()) << "rank 2 is the spare";
  lost.mutable_nodes(1)->set_rank(0);
  EXPECT_FALSE(CheckNoticeFields(kIds, lost).ok()) << "server 0 is no spare";
  lost.mutable_nodes(1)->set_rank(3);
  EXPECT_FALSE(CheckNoticeFields(kIds, lost).ok());
  lost.mutable_nodes(0)->set_rank(-4);
  lost.mutable_nodes()->RemoveLast();
  EXPECT_FALSE(CheckNoticeFields(kIds, lost).ok());
  wire::Meta table = MetaOf(wire::NODE_TABLE, kSchedulerId);
  for (int i = 0; i < kIds.size(); ++i) table.add_nodes();
  EXPECT_TRUE(CheckNoticeFields(kIds, table).ok());
  table.add_nodes();
  EXPECT_FALSE(CheckNoticeFields(kIds, table).ok());
}

// The live job. Ids: scheduler 0, server 0 is node 1, workers 0 and 1 are nodes 2 and 3.
class RogueMemberTest : public ::testing::TestWithParam<bool> {
 protected:
  // The scheduler's notices, from worker 1 and from ids that are no node's, to the server and
  // to worker 0, plus a fake answer and a replica step and an "ended well" SHUTDOWN.
  static constexpr int kToEachNode = 3 * 6 + 2;
  static constexpr int kToScheduler = 6;

  ClusterConfig Config(wire::Role role, int rank) const {
    ClusterConfig c = TestClusterConfig(role, port_, /*workers=*/2, /*servers=*/1);
    c.rank = rank;
    if (secure_) c.job_secret = secret_;
    return c;
  }

  std::unique_ptr<Transport> TransportFor(const ClusterConfig& c) const {
    std::unique_ptr<Transport> t;
    if (!secure_) return NewInProcTransport();
    EXPECT_TRUE(NewJobTransport(c, &t).ok());
    return t;
  }

  // A scheduler thread, and the server and both workers joined.
  void StartJob() {
    scheduler_ = std::thread([this] {
      const ClusterConfig c = Config(wire::SCHEDULER, -1);
      scheduler_status_ = RunScheduler(c, TransportFor(c), nullptr, [this](const Status&) { ++scheduler_refused_; });
    });
    std::vector<std::thread> joins;
    for (int i = 0; i < 3; ++i) {
      joins.emplace_back([this, i] {
        const ClusterConfig c = Config(i == 0 ? wire::SERVER : wire::WORKER, i == 0 ? 0 : i - 1);
        Status s = Cluster::Join(c, TransportFor(c), &nodes_[i]);
        ASSERT_TRUE(s.ok()) << s;
      });
    }
    for (auto& t : joins) t.join();
  }

  // The rogue: its own connections, as worker 1 (node 3) or as no node at all.
  void ConnectRogue() {
    if (secure_) {
      auth_.secret = secret_;
      auth_.self = "worker 1";
      auth_.job = JobNames{1, 2, 0};
      rogue_ = NewZmqTransport(5000, &auth_);
    } else {
      rogue_ = NewInProcTransport();
    }
    for (int id = 0; id < 3; ++id) {
      const wire::Node& n = nodes_[1]->node(id);
      ASSERT_TRUE(rogue_->Connect(id, n.host(), n.port()).ok());
    }
  }

  void Send(int to, wire::Command command, int sender, void (*fill)(wire::Meta*) = nullptr) {
    Message m;
    m.meta.set_command(command);
    m.meta.set_sender_id(sender);
    m.meta.set_receiver_id(to);
    if (fill) fill(&m.meta);
    ASSERT_TRUE(rogue_->Send(to, m).ok());
  }

  void SendAttacks();

  // Refusals are counted as they arrive; a slow machine gets them late, not never.
  void WaitForRefusals() {
    const auto deadline = Clock::now() + std::chrono::seconds(300);
    while ((nodes_[0]->refused() < kToEachNode || nodes_[1]->refused() < kToEachNode ||
            scheduler_refused_ < kToScheduler) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // The job ends as it would have: a barrier of all, the workers finish, the server ends.
  void EndJob() {
    std::vector<std::thread> ends;
    Status server_end;
    for (int i = 0; i < 3; ++i) {
      ends.emplace_back([&, i] {
        ASSERT_TRUE(nodes_[i]->Barrier(kGroupAll, 10000).ok());
        if (i == 0) {
          server_end = nodes_[0]->WaitForShutdown();
        } else {
          EXPECT_TRUE(nodes_[i]->Finish(10000).ok());
        }
      });
    }
    for (auto& t : ends) t.join();
    scheduler_.join();
    EXPECT_TRUE(server_end.ok()) << server_end;
    EXPECT_TRUE(scheduler_status_.ok()) << scheduler_status_;
  }

  const bool secure_ = GetParam();
  const int port_ = TestPort(secure_);
  const std::string secret_ = std::string(32, '\x5a');
  std::thread scheduler_;
  Status scheduler_status_;
  std::atomic<int> scheduler_refused_{0};
  std::unique_ptr<Cluster> nodes_[3];  // server 0, worker 0, worker 1
  JobAuth auth_;
  std::unique_ptr<Transport> rogue_;
};

void RogueMemberTest::SendAttacks() {
  auto error = [](wire::Meta* m) { m->set_error("the rogue ends the job"); };
  auto lost = [](wire::Meta* m) {
    wire::Node* n = m->add_nodes();
    n->set_role(wire::SERVER);
    n->set_rank(0);
    n->set_id(1);
  };
  auto table = [](wire::Meta* m) {
    for (int i = 0; i < 4; ++i) m->add_nodes()->set_id(i);
  };
  auto group = [](wire::Meta* m) { m->set_barrier_group(kGroupAll); };
  auto servers = [](wire::Meta* m) { m->set_barrier_group(kGroupServers); };
  auto clock_sample = [](wire::Meta* m) {
    m->set_clock_echo_us(1);
    m->set_clock_us(int64_t{1} << 50);
  };
  for (int to : {1, 2}) {
    for (int sender : {3, -1, -7}) {
      Send(to, wire::SHUTDOWN, sender, error);
      Send(to, wire::NODE_DEAD, sender, lost);
      Send(to, wire::SERVER_LOST, sender, lost);
      Send(to, wire::BARRIER_DONE, sender, group);
      Send(to, wire::NODE_TABLE, sender, table);
      Send(to, wire::HEARTBEAT, sender, clock_sample);
    }
    Send(to, to == 1 ? wire::REPLICATE : wire::RESPONSE, 3, error);
    Send(to, wire::SHUTDOWN, 3);  // no error: the job "ended well"
  }
  // To the scheduler: its own notices, a barrier of a group worker 1 is not in, a server's
  // signal, and commands from an id that is no node's.
  Send(0, wire::SHUTDOWN, 3, error);
  Send(0, wire::NODE_DEAD, 3, lost);
  Send(0, wire::BARRIER, 3, servers);
  Send(0, wire::REPLICA_READY, 3);
  Send(0, wire::WORKER_DONE, -5);
  Send(0, wire::HEARTBEAT, -5);
}

TEST_P(RogueMemberTest, ControlCommandsFromAWorkerAreRefusedAndTheJobEndsWell) {
  StartJob();
  for (auto& n : nodes_) ASSERT_TRUE(n != nullptr);
  ConnectRogue();
  SendAttacks();
  WaitForRefusals();
  EXPECT_EQ(nodes_[0]->refused(), kToEachNode);
  EXPECT_EQ(nodes_[1]->refused(), kToEachNode);
  EXPECT_EQ(scheduler_refused_.load(), kToScheduler);
  for (auto& n : nodes_) EXPECT_TRUE(n->failure().ok()) << n->failure();
  EndJob();
}

INSTANTIATE_TEST_SUITE_P(Transports, RogueMemberTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "secure" : "inproc"; });

}  // namespace
}  // namespace tally
