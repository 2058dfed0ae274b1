// A worker joining a running --elastic job: which rank it takes (JoinRank, RepeatsRegister:
// scheduler/join.h), and, in a job of threads (a scheduler, a server, two workers,
// in-process transport), worker 1 leaves and a new process registers as worker 1: it gets
// the node table, the change is appended to membership.jsonl as "joined", and the job ends
// when worker 0 and the joiner are done.
#include "scheduler/join.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/local_job.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

Message Register(wire::Role role, int rank, const std::string& peer = "") {
  Message m;
  m.meta.set_command(wire::REGISTER);
  m.meta.set_sender_id(-1);
  wire::Node* n = m.meta.add_nodes();
  n->set_role(role);
  n->set_rank(rank);
  n->set_host("10.0.0.9");
  n->set_port(4000);
  n->set_pid(77);
  m.meta.set_membership_epoch(1);  // it can join
  m.peer = peer;
  return m;
}

// Worker `rank` of m leaves (decided: no longer live).
void Leave(ElasticMembership* m, int rank) {
  m->Queue(rank, "left");
  int r;
  ASSERT_TRUE(m->Start(&r));
  m->Expect({1});
  ASSERT_TRUE(m->Report(1, m->epoch() + 1, 9, 9));
  int64_t from, skip;
  ASSERT_TRUE(m->Decide(&from, &skip).ok());
}

TEST(JoinRank, OnlyAWorkerAtARankNotLiveAndNotLeavingJoins) {
  ClusterConfig cfg;
  cfg.num_workers = 4;
  ElasticMembership m(4, "");
  int rank = -1;
  EXPECT_NE(JoinRank(cfg, m, Register(wire::SERVER, 1), &rank).message().find("only workers join"), std::string::npos);
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, 0), &rank).message().find("worker 0 is live"), std::string::npos);
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, 4), &rank).message().find("out of range"), std::string::npos);
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, 2), &rank).message().find("worker 2 is live"), std::string::npos);
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, -1), &rank).message().find("every worker rank is live"),
            std::string::npos);
  m.Queue(2, "stopped answering");
  int leaver;
  ASSERT_TRUE(m.Start(&leaver));
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, 2), &rank).message().find("still leaving"), std::string::npos);
  m.Expect({1});
  ASSERT_TRUE(m.Report(1, 1, 9, 9));
  int64_t from, skip;
  ASSERT_TRUE(m.Decide(&from, &skip).ok());
  Leave(&m, 1);
  ASSERT_TRUE(JoinRank(cfg, m, Register(wire::WORKER, 2), &rank).ok());
  EXPECT_EQ(rank, 2);
  ASSERT_TRUE(JoinRank(cfg, m, Register(wire::WORKER, -1), &rank).ok());
  EXPECT_EQ(rank, 1) << "the lowest rank not live";
  Leave(&m, 0);  // worker 0 may leave (the lead passes on) and join again
  ASSERT_TRUE(JoinRank(cfg, m, Register(wire::WORKER, -1), &rank).ok());
  EXPECT_EQ(rank, 0) << "the lowest rank not live";
  ASSERT_TRUE(JoinRank(cfg, m, Register(wire::WORKER, 0), &rank).ok());
  EXPECT_EQ(rank, 0);
  Message two = Register(wire::WORKER, 2);
  two.meta.add_nodes()->set_role(wire::WORKER);
  EXPECT_NE(JoinRank(cfg, m, two, &rank).message().find("naming 2 nodes"), std::string::npos);
  Message cannot = Register(wire::WORKER, 2);
  cannot.meta.set_membership_epoch(0);
  EXPECT_NE(JoinRank(cfg, m, cannot, &rank).message().find("cannot join a running job"), std::string::npos);
}

TEST(JoinRank, WithTheJobsSecretTheJoinerMustHaveAuthenticatedAsItsRank) {
  ClusterConfig cfg;
  cfg.num_workers = 3;
  cfg.job_secret = std::string(32, 's');
  ElasticMembership m(3, "");
  Leave(&m, 2);
  int rank = -1;
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, 2, "worker 1"), &rank).message().find("authenticated as worker 1"),
            std::string::npos);
  EXPECT_NE(JoinRank(cfg, m, Register(wire::WORKER, -1), &rank).message().find("authenticated as nobody"),
            std::string::npos);
  ASSERT_TRUE(JoinRank(cfg, m, Register(wire::WORKER, 2, "worker 2"), &rank).ok());
  EXPECT_EQ(rank, 2);
}

TEST(JoinRank, ARepeatIsTheSameAddressAndPid) {
  std::vector<wire::Node> nodes(3);
  nodes[2] = Register(wire::WORKER, 1).meta.nodes(0);
  nodes[2].set_id(2);
  EXPECT_TRUE(RepeatsRegister(nodes, Register(wire::WORKER, 1)));
  EXPECT_TRUE(RepeatsRegister(nodes, Register(wire::WORKER, -1))) << "admitted under the rank given it";
  Message other = Register(wire::WORKER, 1);
  other.meta.mutable_nodes(0)->set_pid(78);
  EXPECT_FALSE(RepeatsRegister(nodes, other));
  EXPECT_FALSE(RepeatsRegister(nodes, Register(wire::SERVER, 1)));
}

TEST(RetoldMembership, NamesEachLiveWorkerByItsEntryNowAndKeepsTheRest) {
  const NodeIds ids{1, 3, 0};  // 1 server, 3 workers
  std::vector<wire::Node> nodes(ids.size());
  for (int r = 0; r < 3; ++r) {
    wire::Node& n = nodes[ids.Worker(r)];
    n.set_role(wire::WORKER);
    n.set_rank(r);
    n.set_id(ids.Worker(r));
    n.set_host("10.0.0." + std::to_string(r));
    n.set_port(5000 + r);
    n.set_pid(100 + r);
  }
  wire::Meta then;  // membership 1: worker 1 left; worker 2 was then a process since gone
  then.set_command(wire::MEMBERSHIP);
  then.set_membership_epoch(1);
  then.set_step(30);
  then.set_skipped_step(31);
  then.set_num_workers(2);
  for (int r : {0, 2}) {
    wire::Node* n = then.add_nodes();
    *n = nodes[ids.Worker(r)];
    if (r == 2) n->set_pid(7);  // the old process
  }
  const wire::Meta told = RetoldMembership(then, nodes, ids);
  EXPECT_EQ(told.command(), wire::MEMBERSHIP);
  EXPECT_EQ(told.membership_epoch(), 1);
  EXPECT_EQ(told.step(), 30);
  EXPECT_EQ(told.skipped_step(), 31);
  EXPECT_EQ(told.num_workers(), 2);
  ASSERT_EQ(told.nodes_size(), 2);
  EXPECT_EQ(told.nodes(0).rank(), 0);
  EXPECT_EQ(told.nodes(1).rank(), 2);
  EXPECT_EQ(told.nodes(1).pid(), 102) << "the process the table names now, not the one gone";
  EXPECT_EQ(told.nodes(1).host(), "10.0.0.2");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(JoinJob, AWorkerRegisteringAfterALeaveJoinsAndTheJobEndsWithIt) {
  ScopedTempDir dir("join_test");
  const int port = TestPort(false);
  SchedulerOptions options;
  options.elastic = true;
  options.membership_log = dir.Path("membership.jsonl");
  Status scheduler, server;
  std::thread s([&] {
    scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 1), NewInProcTransport(), nullptr, nullptr,
                             options);
  });
  std::thread v([&] {
    ElasticOptions e;
    e.elastic = true;
    server = RunServer(TestClusterConfig(wire::SERVER, port, 2, 1), NewInProcTransport(), ServerObserver(), e);
  });
  std::unique_ptr<Cluster> workers[2];
  auto join = [&](int r) {
    ClusterConfig c = TestClusterConfig(wire::WORKER, port, 2, 1);
    c.rank = r;
    c.can_join = true;
    Status st = Cluster::Join(c, NewInProcTransport(), &workers[r]);
    EXPECT_TRUE(st.ok()) << st;
  };
  std::thread j0([&] { join(0); });
  join(1);
  j0.join();
  ASSERT_TRUE(workers[0] && workers[1]);
  Message leave;
  leave.meta.set_command(wire::LEAVE);
  leave.meta.set_step(0);
  ASSERT_TRUE(workers[1]->Send(kSchedulerId, std::move(leave)).ok());
  EXPECT_TRUE(workers[1]->Finish(60000).ok());  // its SHUTDOWN, once the leave is decided
  workers[1].reset();
  EXPECT_EQ(workers[0]->joined_after_epoch(), 0);
  join(1);  // a new process as worker 1
  ASSERT_TRUE(workers[1]);
  EXPECT_EQ(workers[1]->joined_after_epoch(), 1) << "it joins after the leave, membership 1";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ReadFile(dir.Path("membership.jsonl")).find("joined") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string log = ReadFile(dir.Path("membership.jsonl"));
  EXPECT_NE(log.find("\"epoch\": 2, \"from_step\": 0, \"joined\": [1], \"live\": [0, 1], \"why\": \"worker 1 joined"),
            std::string::npos)
      << log;
  std::thread other([&] { EXPECT_TRUE(workers[1]->Finish(60000).ok()); });
  EXPECT_TRUE(workers[0]->Finish(60000).ok());  // the job's SHUTDOWN once both live workers are done
  other.join();
  s.join();
  v.join();
  EXPECT_TRUE(scheduler.ok()) << scheduler;
  EXPECT_TRUE(server.ok()) << server;
}

// Once a live worker has finished, the job is ending: a joiner's first step could come after
// its last, and nobody would push the step before it. It is not admitted.
TEST(JoinJob, NobodyJoinsOnceAWorkerHasFinished) {
  const int port = TestPort(false);
  SchedulerOptions options;
  options.elastic = true;
  Status scheduler, server;
  std::thread s([&] {
    scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 3, 1), NewInProcTransport(), nullptr, nullptr,
                             options);
  });
  std::thread v([&] {
    ElasticOptions e;
    e.elastic = true;
    server = RunServer(TestClusterConfig(wire::SERVER, port, 3, 1), NewInProcTransport(), ServerObserver(), e);
  });
  std::unique_ptr<Cluster> workers[3];
  auto join = [&](int r, int register_timeout_ms) {
    ClusterConfig c = TestClusterConfig(wire::WORKER, port, 3, 1);
    c.rank = r;
    c.can_join = true;
    c.register_timeout_ms = register_timeout_ms;
    return Cluster::Join(c, NewInProcTransport(), &workers[r]);
  };
  std::thread j0([&] { EXPECT_TRUE(join(0, 20000).ok()); });
  std::thread j1([&] { EXPECT_TRUE(join(1, 20000).ok()); });
  EXPECT_TRUE(join(2, 20000).ok());
  j0.join();
  j1.join();
  ASSERT_TRUE(workers[0] && workers[1] && workers[2]);
  Message leave;
  leave.meta.set_command(wire::LEAVE);
  leave.meta.set_step(0);
  ASSERT_TRUE(workers[2]->Send(kSchedulerId, std::move(leave)).ok());
  EXPECT_TRUE(workers[2]->Finish(60000).ok());  // the leave is decided
  workers[2].reset();
  Message done;
  done.meta.set_command(wire::WORKER_DONE);
  // In-process, worker 0's WORKER_DONE is in the scheduler's queue before the REGISTER below:
  // the new worker 2 is never admitted.
  ASSERT_TRUE(workers[0]->Send(kSchedulerId, std::move(done)).ok());
  std::thread done0([&] { EXPECT_TRUE(workers[0]->Finish(60000).ok()); });
  Status refused = join(2, 1500);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("did not answer"), std::string::npos) << refused;
  EXPECT_TRUE(workers[1]->Finish(60000).ok());
  done0.join();
  s.join();
  v.join();
  EXPECT_TRUE(scheduler.ok()) << scheduler;
  EXPECT_TRUE(server.ok()) << server;
}

// The job's one server is a bare Cluster here, which answers MEMBERSHIP_PREPARE when the test
// says: the joiner says LEAVE while its join is decided, and leaves in the next change.
TEST(JoinJob, AJoinerThatLeavesWhileItsJoinIsDecidedLeavesNext) {
  ScopedTempDir dir("join_test");
  const int port = TestPort(false);
  SchedulerOptions options;
  options.elastic = true;
  options.membership_log = dir.Path("membership.jsonl");
  Status scheduler;
  std::thread s([&] {
    scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 1), NewInProcTransport(), nullptr, nullptr,
                             options);
  });
  std::unique_ptr<Cluster> server, workers[2];
  std::mutex mu;
  std::vector<int64_t> prepared;  // the epochs of the MEMBERSHIP_PREPAREs taken in
  auto join = [&](wire::Role role, int r, std::unique_ptr<Cluster>* out) {
    ClusterConfig c = TestClusterConfig(role, port, 2, 1);
    c.rank = r;
    c.can_join = true;
    Status st = Cluster::Join(c, NewInProcTransport(), out);
    EXPECT_TRUE(st.ok()) << st;
  };
  std::thread j0([&] { join(wire::SERVER, 0, &server); });
  std::thread j1([&] { join(wire::WORKER, 0, &workers[0]); });
  join(wire::WORKER, 1, &workers[1]);
  j0.join();
  j1.join();
  ASSERT_TRUE(server && workers[0] && workers[1]);
  server->SetDataHandler([&](Message&& m) {
    if (m.meta.command() != wire::MEMBERSHIP_PREPARE) return;
    std::lock_guard<std::mutex> lock(mu);
    prepared.push_back(m.meta.membership_epoch());
  });
  auto report = [&](int64_t epoch) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!prepared.empty() && prepared.back() == epoch) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Message r;
    r.meta.set_command(wire::MEMBERSHIP_REPORT);
    r.meta.set_membership_epoch(epoch);
    r.meta.set_step(9);
    r.meta.set_applied_max(9);
    ASSERT_TRUE(server->Send(kSchedulerId, std::move(r)).ok());
  };
  Message leave;
  leave.meta.set_command(wire::LEAVE);
  leave.meta.set_step(10);
  ASSERT_TRUE(workers[1]->Send(kSchedulerId, leave).ok());
  report(1);
  EXPECT_TRUE(workers[1]->Finish(60000).ok());
  workers[1].reset();
  join(wire::WORKER, 1, &workers[1]);  // joins; the server holds its report back
  ASSERT_TRUE(workers[1]);
  leave.meta.set_step(12);
  ASSERT_TRUE(workers[1]->Send(kSchedulerId, leave).ok());
  // In-process sends reach the scheduler's queue at once: the LEAVE comes before the report.
  report(2);
  report(3);  // the leave that follows
  EXPECT_TRUE(workers[1]->Finish(60000).ok()) << "its SHUTDOWN, once its leave is decided";
  EXPECT_TRUE(workers[0]->Finish(60000).ok());
  EXPECT_TRUE(server->WaitForShutdown().ok());
  s.join();
  EXPECT_TRUE(scheduler.ok()) << scheduler;
  const std::string log = ReadFile(dir.Path("membership.jsonl"));
  EXPECT_NE(log.find("\"epoch\": 2, \"from_step\": 11, \"joined\": [1]"), std::string::npos) << log;
  EXPECT_NE(log.find("\"epoch\": 3, \"from_step\": 10, \"left\": [1], \"live\": [0]"), std::string::npos) << log;
}

// A join decided between the job's last step and its end (the late-join race): the bare
// server reports step 9 applied, so worker 1, joining after its leave, starts at step 11;
// worker 0 then finishes after 11 steps of the run (its last, step 10). The joiner's first
// step never comes: the scheduler tells it so (a SHUTDOWN naming it) and counts it done, and
// the job ends at once.
TEST(JoinJob, AJoinerWhoseFirstStepIsPastTheJobsLastIsToldTheJobEndedAndTheJobEnds) {
  ScopedTempDir dir("join_test");
  const int port = TestPort(false);
  SchedulerOptions options;
  options.elastic = true;
  options.membership_log = dir.Path("membership.jsonl");
  Status scheduler;
  std::thread s([&] {
    scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 1), NewInProcTransport(), nullptr, nullptr,
                             options);
  });
  std::unique_ptr<Cluster> server, workers[2];
  std::atomic<int64_t> prepared{0};  // the epoch of the last MEMBERSHIP_PREPARE taken in
  auto join = [&](wire::Role role, int r, std::unique_ptr<Cluster>* out) {
    ClusterConfig c = TestClusterConfig(role, port, 2, 1);
    c.rank = r;
    c.can_join = true;
    Status st = Cluster::Join(c, NewInProcTransport(), out);
    EXPECT_TRUE(st.ok()) << st;
  };
  std::thread j0([&] { join(wire::SERVER, 0, &server); });
  std::thread j1([&] { join(wire::WORKER, 0, &workers[0]); });
  join(wire::WORKER, 1, &workers[1]);
  j0.join();
  j1.join();
  ASSERT_TRUE(server && workers[0] && workers[1]);
  server->SetDataHandler([&](Message&& m) {
    if (m.meta.command() == wire::MEMBERSHIP_PREPARE) prepared = m.meta.membership_epoch();
  });
  auto report = [&](int64_t epoch) {  // step 9 applied, worker 1's pushes counted through it
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (prepared < epoch && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Message r;
    r.meta.set_command(wire::MEMBERSHIP_REPORT);
    r.meta.set_membership_epoch(epoch);
    r.meta.set_step(9);
    r.meta.set_applied_max(9);
    ASSERT_TRUE(server->Send(kSchedulerId, std::move(r)).ok());
  };
  Message leave;
  leave.meta.set_command(wire::LEAVE);
  leave.meta.set_step(10);
  ASSERT_TRUE(workers[1]->Send(kSchedulerId, leave).ok());
  report(1);
  EXPECT_TRUE(workers[1]->Finish(60000).ok());
  workers[1].reset();
  join(wire::WORKER, 1, &workers[1]);
  ASSERT_TRUE(workers[1]);
  report(2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ReadFile(dir.Path("membership.jsonl")).find("joined") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(ReadFile(dir.Path("membership.jsonl")).find("\"epoch\": 2, \"from_step\": 11, \"joined\": [1]"),
            std::string::npos);
  EXPECT_TRUE(workers[0]->Finish(60000, /*steps=*/11).ok());  // the job's SHUTDOWN: nobody left to wait for
  Status told = workers[1]->Finish(60000);
  EXPECT_FALSE(told.ok());
  EXPECT_NE(told.message().find("the job's last step was 10, before worker 1's first, step 11: " +
                                std::string(kEndedBeforeItsFirstStep)),
            std::string::npos)
      << told;
  EXPECT_TRUE(server->WaitForShutdown().ok());
  s.join();
  EXPECT_TRUE(scheduler.ok()) << scheduler;
}

}  // namespace
}  // namespace tally
