// A worker joining a running --elastic job, the store's part (DistKVStore::Init of a joiner,
// dist_kvstore.h), in a job of threads over the in-process transport: a scheduler, two
// servers and two workers. Worker 1 leaves before step 3; a new worker 1 registers with
// can_join while worker 0 trains on. Its Init pulls exactly the weights worker 0 had after
// the step before the joiner's first, its HeardMembership holds both changes (the leave,
// which the scheduler told it again, and its join), and from its first step on both
// workers' pushes are summed. Meanwhile another thread reads worker 0's node table entry
// of worker 1 (Cluster::node), which the join replaces, until it names the new process;
// worker 0 tells the joiner a loss scale for its first step once it has settled the one
// before (TrainerHooks::TellLossScale), and the joiner gets it (JoinedLossScale).
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvstore/kvstore.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/local_job.h"

namespace tally {
namespace {

constexpr int64_t kLeaveAt = 3;  // worker 1's first process pushes steps 0, 1, 2
constexpr int64_t kHoldAt = 8;   // worker 0 waits here for the joiner to have registered
constexpr int64_t kSteps = 16;
constexpr int64_t kSize = 16;

using Clock = std::chrono::steady_clock;

std::unique_ptr<KVStore> Store(Cluster* c) {
  KVStoreSpec spec;
  spec.type = KVStoreType::kDistSync;
  spec.cluster = c;
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  OptimizerConfig opt;
  opt.lr = 0.5f;
  opt.momentum = 0.0f;
  opt.wd = 0.0f;
  EXPECT_TRUE(kv->SetOptimizer(opt).ok());
  return kv;
}

std::unique_ptr<Cluster> JoinAs(int port, int rank, bool can_join) {
  ClusterConfig c = TestClusterConfig(wire::WORKER, port, 2, 2);
  c.rank = rank;
  c.can_join = can_join;
  std::unique_ptr<Cluster> cluster;
  Status s = Cluster::Join(c, NewInProcTransport(), &cluster);
  EXPECT_TRUE(s.ok()) << s;
  return cluster;
}

// Step `step` of worker `rank`: pushes (step + 1) * (rank + 1) for both keys and pulls the
// weights after it into w[0], w[1].
void Step(KVStore* kv, int rank, int64_t step, std::vector<Tensor>* w) {
  for (int key = 0; key < 2; ++key) {
    Tensor g = Tensor::Empty({kSize}, DType::kF32);
    g.Fill(static_cast<float>((step + 1) * (rank + 1)) * (key + 1));
    ASSERT_TRUE(kv->PushPull(key, {g}, {(*w)[key]}).ok());
  }
  Status s = kv->WaitAll();
  ASSERT_TRUE(s.ok()) << s;
}

// The scheduler and the two servers of the job, as threads.
struct Roles {
  explicit Roles(int port) {
    SchedulerOptions options;
    options.elastic = true;
    threads.emplace_back([this, port, options] {
      scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 2), NewInProcTransport(), nullptr, nullptr,
                               options);
    });
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([this, port, r] {
        ClusterConfig c = TestClusterConfig(wire::SERVER, port, 2, 2);
        c.rank = r;
        ElasticOptions e;
        e.elastic = true;
        servers[r] = RunServer(c, NewInProcTransport(), ServerObserver(), e);
      });
    }
  }
  void Join() {
    for (auto& t : threads) t.join();
    EXPECT_TRUE(scheduler.ok()) << scheduler;
    for (const Status& s : servers) EXPECT_TRUE(s.ok()) << s;
  }
  Status scheduler, servers[2];
  std::vector<std::thread> threads;
};

// What the test watches: worker 0's weights of key 0 after each step and the workers each
// step summed; the joiner's new port once it registered, its first step and pulled weights.
struct Seen {
  std::vector<std::vector<float>> weights = std::vector<std::vector<float>>(kSteps);
  std::vector<int> summed = std::vector<int>(kSteps);
  std::atomic<bool> registered{false};
  std::atomic<int> new_port{-1};
  int64_t from = -1;
  std::vector<float> pulled;
};

// Worker 0: every step, waiting before kHoldAt until the joiner has registered.
void WorkerZero(Cluster* zero, Seen* seen) {
  std::unique_ptr<KVStore> kv = Store(zero);
  ASSERT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)}).ok());
  std::vector<Tensor> w = {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)};
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (step == kHoldAt && !seen->registered.load() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Step(kv.get(), 0, step, &w);
    seen->weights[step].assign(w[0].data<float>(), w[0].data<float>() + kSize);
    seen->summed[step] = kv->membership_view()->summed_workers();
    std::vector<MembershipView::Membership> heard;  // a join from the next step: its loss scale
    ASSERT_TRUE(kv->membership_view()->HeardMembership(&heard).ok());
    if (heard.size() == 2 && heard[1].from_step == step + 1) {
      TrainerHooks::LossScaleState state;
      state.scale = 1024.0f;
      state.clean = 7;
      state.overflows = 3;
      ASSERT_TRUE(kv->trainer_hooks()->TellLossScale(1, step + 1, state).ok());
    }
  }
  Status s = zero->Finish(60000);
  EXPECT_TRUE(s.ok()) << s;
}

// Worker 1's first process: steps 0 to kLeaveAt - 1, then LEAVE.
void FirstProcess(Cluster* one) {
  std::unique_ptr<KVStore> kv = Store(one);
  ASSERT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)}).ok());
  std::vector<Tensor> w = {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)};
  for (int64_t step = 0; step < kLeaveAt; ++step) Step(kv.get(), 1, step, &w);
  Message leave;
  leave.meta.set_command(wire::LEAVE);
  leave.meta.set_step(kLeaveAt);
  ASSERT_TRUE(one->Send(kSchedulerId, std::move(leave)).ok());
  EXPECT_TRUE(one->Finish(60000).ok()) << "its SHUTDOWN, once the leave is decided";
}

// Worker 1's new process: joins, checks what its Init and HeardMembership give, trains on.
void Joiner(int port, Seen* seen) {
  std::unique_ptr<Cluster> joiner = JoinAs(port, 1, true);
  ASSERT_TRUE(joiner);
  seen->new_port = joiner->me().port();
  seen->registered = true;
  EXPECT_EQ(joiner->joined_after_epoch(), 1);
  std::unique_ptr<KVStore> kv = Store(joiner.get());
  std::vector<Tensor> w = {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)};
  Status s = kv->Init({0, 1}, w);  // writes the job's weights into w
  ASSERT_TRUE(s.ok()) << s;
  const int64_t from = kv->membership_view()->first_step();
  // Two after the newest step applied when decided: worker 0 waits before step kHoldAt
  // until the joiner registered, and may push that step before the servers hold theirs.
  ASSERT_GT(from, kLeaveAt);
  ASSERT_LE(from, kHoldAt + 2);
  std::vector<MembershipView::Membership> heard;
  ASSERT_TRUE(kv->membership_view()->HeardMembership(&heard).ok());
  ASSERT_EQ(heard.size(), 2u) << "the leave, told again, and the join";
  EXPECT_EQ(heard[0].epoch, 1);
  EXPECT_EQ(heard[0].from_step, kLeaveAt);
  EXPECT_EQ(heard[0].live, std::vector<int>{0});
  EXPECT_EQ(heard[1].epoch, 2);
  EXPECT_EQ(heard[1].from_step, from);
  EXPECT_EQ(heard[1].live, (std::vector<int>{0, 1}));
  TrainerHooks::LossScaleState scale;  // worker 0's, for this worker's first step
  ASSERT_TRUE(kv->trainer_hooks()->JoinedLossScale(from, &scale).ok());
  EXPECT_EQ(scale.scale, 1024.0f);
  EXPECT_EQ(scale.clean, 7);
  EXPECT_EQ(scale.overflows, 3);
  seen->pulled.assign(w[0].data<float>(), w[0].data<float>() + kSize);
  seen->from = from;
  for (int64_t step = from; step < kSteps; ++step) Step(kv.get(), 1, step, &w);
  EXPECT_TRUE(joiner->Finish(60000).ok());
}

TEST(JoinerStore, PullsTheWeightsAfterTheStepBeforeItsFirstAndHearsEveryChange) {
  const int port = TestPort(false);
  Roles roles(port);
  std::unique_ptr<Cluster> first[2];
  std::thread gather([&] { first[1] = JoinAs(port, 1, false); });
  first[0] = JoinAs(port, 0, false);
  gather.join();
  ASSERT_TRUE(first[0] && first[1]);
  Cluster* zero = first[0].get();
  const wire::Node old_one = zero->node(zero->WorkerId(1));
  Seen seen;
  std::thread worker0([&] { WorkerZero(zero, &seen); });
  // Reads worker 0's entry of worker 1 while the join replaces it, until it is the new one.
  bool saw_new = false;
  std::thread reader([&] {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!saw_new && Clock::now() < deadline) {
      const wire::Node n = zero->node(zero->WorkerId(1));
      saw_new = n.port() == seen.new_port.load() && n.rank() == 1;
    }
  });
  FirstProcess(first[1].get());
  first[1].reset();
  Joiner(port, &seen);
  worker0.join();
  reader.join();
  roles.Join();
  ASSERT_GT(seen.from, kLeaveAt);
  EXPECT_EQ(seen.pulled, seen.weights[seen.from - 1]) << "the weights after step " << seen.from - 1 << ", no others";
  EXPECT_NE(seen.pulled, seen.weights[seen.from]);
  for (int64_t step = 0; step < kSteps; ++step) {
    EXPECT_EQ(seen.summed[step], step < kLeaveAt || step >= seen.from ? 2 : 1) << "step " << step;
  }
  EXPECT_TRUE(saw_new) << "worker 0's node table still names " << DescribeNode(old_one);
}

}  // namespace
}  // namespace tally
