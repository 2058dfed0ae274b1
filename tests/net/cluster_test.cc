// Membership end to end: a scheduler, servers and workers as threads of this process, over
// the in-process transport and over ZeroMQ on loopback.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "net/cluster.h"
#include "scheduler/scheduler.h"
#include "tests/local_job.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

// The shared test job's settings, with heartbeats fast enough to see a death in a test.
ClusterConfig Config(wire::Role role, int port, int workers, int servers) {
  ClusterConfig c = TestClusterConfig(role, port, workers, servers);
  c.heartbeat_interval_ms = 50;
  c.dead_timeout_ms = 400;
  c.register_timeout_ms = 5000;
  return c;
}

std::unique_ptr<Transport> MakeTransport(bool zmq) { return zmq ? NewZmqTransport() : NewInProcTransport(); }


class ClusterTest : public ::testing::TestWithParam<bool> {};

TEST_P(ClusterTest, GathersAssignsRanksRunsBarriersAndShutsDown) {
  const bool zmq = GetParam();
  const int port = TestPort(zmq);
  Status sched_status;
  std::thread scheduler([&] {
    sched_status = RunScheduler(Config(wire::SCHEDULER, port, 2, 2), MakeTransport(zmq));
  });
  std::vector<std::thread> nodes;
  std::atomic<int> barriers_passed{0};
  for (int i = 0; i < 4; ++i) {
    nodes.emplace_back([&, i] {
      const bool server = i < 2;
      ClusterConfig c = Config(server ? wire::SERVER : wire::WORKER, port, 2, 2);
      if (!server) c.rank = 3 - i;  // workers ask for ranks in reverse order of starting
      std::unique_ptr<Cluster> cluster;
      Status s = Cluster::Join(c, MakeTransport(zmq), &cluster);
      ASSERT_TRUE(s.ok()) << s;
      if (!server) {
        EXPECT_EQ(cluster->me().rank(), 3 - i);
        EXPECT_EQ(cluster->me().id(), cluster->WorkerId(3 - i));
      }
      ASSERT_TRUE(cluster->Barrier(kGroupAll, 5000).ok());
      ++barriers_passed;
      if (server) {
        EXPECT_TRUE(cluster->WaitForShutdown().ok());
      } else {
        ASSERT_TRUE(cluster->Barrier(kGroupWorkers, 5000).ok());
        EXPECT_TRUE(cluster->Finish(5000).ok());
      }
    });
  }
  for (auto& t : nodes) t.join();
  scheduler.join();
  EXPECT_TRUE(sched_status.ok()) << sched_status;
  EXPECT_EQ(barriers_passed, 4);
}

TEST_P(ClusterTest, ASilentWorkerIsDeclaredDeadAndEveryoneIsTold) {
  const bool zmq = GetParam();
  const int port = TestPort(zmq);
  Status sched_status;
  std::thread scheduler([&] {
    sched_status = RunScheduler(Config(wire::SCHEDULER, port, 2, 1), MakeTransport(zmq));
  });
  std::vector<std::unique_ptr<Cluster>> clusters(3);
  std::vector<std::thread> joins;
  for (int i = 0; i < 3; ++i) {
    joins.emplace_back([&, i] {
      ClusterConfig c = Config(i == 0 ? wire::SERVER : wire::WORKER, port, 2, 1);
      if (i > 0) c.rank = i - 1;
      Status s = Cluster::Join(c, MakeTransport(zmq), &clusters[i]);
      ASSERT_TRUE(s.ok()) << s;
    });
  }
  for (auto& t : joins) t.join();
  ASSERT_TRUE(clusters[2] != nullptr);
  auto killed = Clock::now();
  clusters[2].reset();  // worker 1 goes silent
  Status server_end = clusters[0]->WaitForShutdown();
  auto noticed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  scheduler.join();
  EXPECT_FALSE(server_end.ok());
  EXPECT_NE(server_end.message().find("worker 1"), std::string::npos) << server_end;
  EXPECT_FALSE(sched_status.ok());
  EXPECT_NE(sched_status.message().find("worker 1"), std::string::npos) << sched_status;
  EXPECT_FALSE(clusters[1]->failure().ok());
  EXPECT_LT(noticed, 2000) << "dead timeout is 400 ms";
}

TEST_P(ClusterTest, ASilentSchedulerIsNoticedByEveryNode) {
  const bool zmq = GetParam();
  const int port = TestPort(zmq);
  // A fake scheduler that sends the node table and then falls silent.
  std::unique_ptr<Transport> fake = MakeTransport(zmq);
  int bound = 0;
  ASSERT_TRUE(fake->Bind("127.0.0.1", port, &bound).ok());
  std::unique_ptr<Cluster> worker;
  std::thread join([&] { ASSERT_TRUE(Cluster::Join(Config(wire::WORKER, port, 1, 0), MakeTransport(zmq), &worker).ok()); });
  Message reg;
  ASSERT_TRUE(fake->Recv(&reg, 5000).ok());
  ASSERT_EQ(reg.meta.command(), wire::REGISTER);
  const wire::Node& n = reg.meta.nodes(0);
  ASSERT_TRUE(fake->Connect(1, n.host(), n.port()).ok());
  Message table;
  table.meta.set_command(wire::NODE_TABLE);
  table.meta.set_receiver_id(1);
  wire::Node* s = table.meta.add_nodes();
  s->set_role(wire::SCHEDULER);
  s->set_id(0);
  wire::Node* w = table.meta.add_nodes();
  *w = n;
  w->set_id(1);
  w->set_rank(0);
  ASSERT_TRUE(fake->Send(1, table).ok());
  join.join();
  Status end = worker->Finish(3000);
  EXPECT_FALSE(end.ok());
  EXPECT_NE(end.message().find("scheduler"), std::string::npos) << end;
}

TEST(ClusterConfig, ReadsTheEnvironmentAndNamesBadVariables) {
  setenv("DMLC_ROLE", "server", 1);
  setenv("DMLC_PS_ROOT_URI", "10.1.2.3", 1);
  setenv("DMLC_PS_ROOT_PORT", "9000", 1);
  setenv("DMLC_NUM_WORKER", "4", 1);
  setenv("DMLC_NUM_SERVER", "2", 1);
  ClusterConfig c;
  Status s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("no job secret"), std::string::npos) << "authentication is on by default: " << s;
  setenv("TALLY_PLAIN", "1", 1);
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_TRUE(c.job_secret.empty());
  setenv("TALLY_JOB_SECRET", std::string(64, 'a').c_str(), 1);
  s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("contradict"), std::string::npos) << s;
  unsetenv("TALLY_PLAIN");
  s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("TALLY_RANK"), std::string::npos) << "a secret needs ranks: " << s;
  setenv("TALLY_RANK", "1", 1);
  c = ClusterConfig();
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_EQ(c.job_secret, std::string(32, '\xaa'));
  setenv("TALLY_JOB_SECRET", "abc", 1);
  s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("TALLY_JOB_SECRET must hold 64 hex digits"), std::string::npos) << s;
  setenv("TALLY_JOB_SECRET", std::string(64, 'a').c_str(), 1);
  setenv("TALLY_TEST_FAULTS", "drop=0.5,seed=3", 1);
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_DOUBLE_EQ(c.faults.drop, 0.5);
  unsetenv("TALLY_TEST_FAULTS");
  EXPECT_EQ(c.role, wire::SERVER);
  EXPECT_EQ(c.scheduler_port, 9000);
  EXPECT_EQ(c.num_workers, 4);
  setenv("DMLC_NUM_WORKER", "four", 1);
  s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("DMLC_NUM_WORKER"), std::string::npos) << s;
  setenv("DMLC_NUM_WORKER", "4", 1);
  // A spare takes a place in the replica chains: none without replicas.
  setenv("TALLY_SPARE_SERVERS", "1", 1);
  s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("TALLY_SPARE_SERVERS=1: a spare takes a lost server's place, which needs "
                             "TALLY_SERVER_REPLICAS >= 1"), std::string::npos) << s;
  setenv("TALLY_SERVER_REPLICAS", "1", 1);
  setenv("TALLY_RANK", "2", 1);  // the spare's rank: servers 0 and 1, then it
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_EQ(c.spare_servers, 1);
  std::unique_ptr<Transport> t;
  EXPECT_TRUE(NewJobTransport(c, &t).ok());
  setenv("TALLY_RANK", "3", 1);
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  s = NewJobTransport(c, &t);
  EXPECT_NE(s.message().find("TALLY_RANK=3: not a rank of this job's 3 servers"), std::string::npos) << s;
  unsetenv("TALLY_SPARE_SERVERS");
  unsetenv("TALLY_SERVER_REPLICAS");
  setenv("TALLY_RANK", "1", 1);
  setenv("DMLC_ROLE", "boss", 1);
  s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("DMLC_ROLE"), std::string::npos) << s;
}

TEST(ClusterConfig, TallyJoinMakesAWorkerOneThatCanJoinARunningJob) {
  setenv("DMLC_ROLE", "worker", 1);
  setenv("DMLC_PS_ROOT_URI", "10.1.2.3", 1);
  setenv("DMLC_PS_ROOT_PORT", "9000", 1);
  setenv("DMLC_NUM_WORKER", "4", 1);
  setenv("DMLC_NUM_SERVER", "2", 1);
  unsetenv("TALLY_JOB_SECRET");
  setenv("TALLY_PLAIN", "1", 1);
  ClusterConfig c;
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_FALSE(c.can_join);
  setenv("TALLY_JOIN", "1", 1);
  c = ClusterConfig();
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_TRUE(c.can_join);
  setenv("DMLC_ROLE", "server", 1);  // inherited by another role: only workers join
  c = ClusterConfig();
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_FALSE(c.can_join);
  setenv("TALLY_JOIN", "yes", 1);
  Status s = ClusterConfigFromEnv(&c);
  EXPECT_NE(s.message().find("TALLY_JOIN='yes' is not an integer in [0, 1]"), std::string::npos) << s;
  unsetenv("TALLY_JOIN");
  unsetenv("TALLY_PLAIN");
}

INSTANTIATE_TEST_SUITE_P(Transports, ClusterTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "zmq" : "inproc"; });

}  // namespace
}  // namespace tally
