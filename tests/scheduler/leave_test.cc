// A worker's LEAVE in a job of threads (a scheduler, a server, two workers, in-process
// transport): refused, ending nothing, outside --elastic and from worker 0; under
// --elastic, worker 1 leaves (its Finish gets its own SHUTDOWN), the change is appended to
// membership.jsonl, and the job ends when worker 0 is done.
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/local_job.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

class LeaveTest : public ::testing::Test {
 protected:
  void Start(bool elastic) {
    port_ = TestPort(false);
    SchedulerOptions options;
    options.elastic = elastic;
    options.membership_log = dir_.Path("membership.jsonl");
    threads_.emplace_back([this, options] {
      scheduler_ = RunScheduler(TestClusterConfig(wire::SCHEDULER, port_, 2, 1), NewInProcTransport(), nullptr,
                                [this](const Status& why) {
                                  if (why.message().find("LEAVE") != std::string::npos) ++refused_;
                                },
                                options);
    });
    threads_.emplace_back([this, elastic] {
      ElasticOptions e;
      e.elastic = elastic;
      server_ = RunServer(TestClusterConfig(wire::SERVER, port_, 2, 1), NewInProcTransport(), ServerObserver(), e);
    });
    std::thread joins[2];
    for (int r = 0; r < 2; ++r) {
      joins[r] = std::thread([this, r] {
        ClusterConfig c = TestClusterConfig(wire::WORKER, port_, 2, 1);
        c.rank = r;
        ASSERT_TRUE(Cluster::Join(c, NewInProcTransport(), &workers_[r]).ok());
      });
    }
    for (auto& t : joins) t.join();
  }
  void Leave(int rank, int64_t step) {
    Message m;
    m.meta.set_command(wire::LEAVE);
    m.meta.set_step(step);
    ASSERT_TRUE(workers_[rank]->Send(kSchedulerId, std::move(m)).ok());
  }
  void WaitRefused(int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (refused_ < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(refused_, n);
  }
  void End() {
    for (auto& t : threads_) t.join();
    EXPECT_TRUE(scheduler_.ok()) << scheduler_;
    EXPECT_TRUE(server_.ok()) << server_;
  }

  ScopedTempDir dir_{"leave_test"};
  int port_ = 0;
  std::vector<std::thread> threads_;
  std::unique_ptr<Cluster> workers_[2];
  std::atomic<int> refused_{0};
  Status scheduler_, server_;
};

TEST_F(LeaveTest, OutsideElasticALeaveIsRefusedAndEndsNothing) {
  Start(/*elastic=*/false);
  Leave(1, 5);
  WaitRefused(1);
  std::thread other([this] { EXPECT_TRUE(workers_[1]->Finish(60000).ok()); });
  EXPECT_TRUE(workers_[0]->Finish(60000).ok());  // the job's SHUTDOWN once both are done
  other.join();
  End();
}

TEST_F(LeaveTest, UnderElasticWorkerOneLeavesAndANegativeStepIsRefused) {
  Start(/*elastic=*/true);
  Leave(0, -1);
  WaitRefused(1);
  Leave(1, 0);
  Status left = workers_[1]->Finish(60000);  // its SHUTDOWN comes once the change is decided
  EXPECT_TRUE(left.ok()) << left;
  EXPECT_TRUE(workers_[0]->Finish(60000).ok());
  End();
  std::ifstream in(dir_.Path("membership.jsonl"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"from_step\": 0, \"left\": [1], \"live\": [0], \"why\": \"worker 1 left before step 0"),
            std::string::npos)
      << text.str();
}

// Worker 0 leaves like any worker (the lead passes to worker 1); the job ends with worker 1.
TEST_F(LeaveTest, UnderElasticWorkerZeroLeavesTooAndTheJobEndsWithWorkerOne) {
  Start(/*elastic=*/true);
  Leave(0, 0);
  Status left = workers_[0]->Finish(60000);
  EXPECT_TRUE(left.ok()) << left;
  EXPECT_TRUE(workers_[1]->Finish(60000).ok());
  End();
  EXPECT_EQ(refused_, 0);
  std::ifstream in(dir_.Path("membership.jsonl"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"from_step\": 0, \"left\": [0], \"live\": [1], \"why\": \"worker 0 left before step 0"),
            std::string::npos)
      << text.str();
}

}  // namespace
}  // namespace tally
