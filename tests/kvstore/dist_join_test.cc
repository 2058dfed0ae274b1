// A worker joining a running --elastic job, the store's part (DistKVStore::Init of a joiner,
// dist_kvstore.h), in a job of threads over the in-process transport: a scheduler, two
// servers and two workers. Worker 1 leaves before step 3; a new worker 1 registers with
// can_join while worker 0 trains on. Its Init pulls exactly the weights worker 0 had after
// the step before the joiner's first, its HeardMembership holds both changes (the leave,
// which the scheduler told it again, and its join), and from its first step on both
// workers' pushes are summed. Meanwhile another thread reads worker 0's node table entry
// of worker 1 (Cluster::node), which the join replaces, until it names the new process.
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

TEST(JoinerStore, PullsTheWeightsAfterTheStepBeforeItsFirstAndHearsEveryChange) {
  const int port = TestPort(false);
  SchedulerOptions options;
  options.elastic = true;
  Status scheduler, servers[2];
  std::vector<std::thread> roles;
  roles.emplace_back([&] {
    scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 2), NewInProcTransport(), nullptr, nullptr,
                             options);
  });
  for (int r = 0; r < 2; ++r) {
    roles.emplace_back([&, r] {
      ClusterConfig c = TestClusterConfig(wire::SERVER, port, 2, 2);
      c.rank = r;
      ElasticOptions e;
      e.elastic = true;
      servers[r] = RunServer(c, NewInProcTransport(), ServerObserver(), e);
    });
  }
  std::unique_ptr<Cluster> first[2];
  std::thread gather([&] { first[1] = JoinAs(port, 1, false); });
  first[0] = JoinAs(port, 0, false);
  gather.join();
  ASSERT_TRUE(first[0] && first[1]);
  Cluster* zero = first[0].get();
  const wire::Node old_one = zero->node(zero->WorkerId(1));

  std::atomic<bool> registered{false};
  std::atomic<int> new_port{-1};
  std::vector<std::vector<float>> weights(kSteps);  // worker 0's key 0 after each step
  std::vector<int> summed(kSteps);
  std::thread worker0([&] {
    std::unique_ptr<KVStore> kv = Store(zero);
    ASSERT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)}).ok());
    std::vector<Tensor> w = {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)};
    for (int64_t step = 0; step < kSteps; ++step) {
      const auto deadline = Clock::now() + std::chrono::seconds(120);
      while (step == kHoldAt && !registered.load() && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      Step(kv.get(), 0, step, &w);
      weights[step].assign(w[0].data<float>(), w[0].data<float>() + kSize);
      summed[step] = kv->summed_workers();
    }
    Status s = zero->Finish(60000);
    EXPECT_TRUE(s.ok()) << s;
  });
  // Reads worker 0's entry of worker 1 while the join replaces it, until it is the new one.
  bool saw_new = false;
  std::thread reader([&] {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!saw_new && Clock::now() < deadline) {
      const wire::Node n = zero->node(zero->WorkerId(1));
      saw_new = n.port() == new_port.load() && n.rank() == 1;
    }
  });

  // The two processes of worker 1 (lambdas: a failed ASSERT returns from them alone, and
  // the threads above are joined below).
  [&] {  // the first: steps 0 to kLeaveAt - 1, then LEAVE
    std::unique_ptr<KVStore> kv = Store(first[1].get());
    ASSERT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)}).ok());
    std::vector<Tensor> w = {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)};
    for (int64_t step = 0; step < kLeaveAt; ++step) Step(kv.get(), 1, step, &w);
    Message leave;
    leave.meta.set_command(wire::LEAVE);
    leave.meta.set_step(kLeaveAt);
    ASSERT_TRUE(first[1]->Send(kSchedulerId, std::move(leave)).ok());
    EXPECT_TRUE(first[1]->Finish(60000).ok()) << "its SHUTDOWN, once the leave is decided";
  }();
  first[1].reset();

  int64_t from = -1;
  std::vector<float> pulled;
  [&] {  // the new process
    std::unique_ptr<Cluster> joiner = JoinAs(port, 1, true);
    ASSERT_TRUE(joiner);
    new_port = joiner->me().port();
    registered = true;
    EXPECT_EQ(joiner->joined_after_epoch(), 1);
    std::unique_ptr<KVStore> kv = Store(joiner.get());
    std::vector<Tensor> w = {Tensor::Zeros({kSize}, DType::kF32), Tensor::Zeros({kSize}, DType::kF32)};
    Status s = kv->Init({0, 1}, w);  // writes the job's weights into w
    ASSERT_TRUE(s.ok()) << s;
    from = kv->first_step();
    // Two after the newest step applied when decided: worker 0 waits before step kHoldAt
    // until the joiner registered, and may push that step before the servers hold theirs.
    ASSERT_GT(from, kLeaveAt);
    ASSERT_LE(from, kHoldAt + 2);
    std::vector<KVStore::Membership> heard;
    ASSERT_TRUE(kv->HeardMembership(&heard).ok());
    ASSERT_EQ(heard.size(), 2u) << "the leave, told again, and the join";
    EXPECT_EQ(heard[0].epoch, 1);
    EXPECT_EQ(heard[0].from_step, kLeaveAt);
    EXPECT_EQ(heard[0].live, std::vector<int>{0});
    EXPECT_EQ(heard[1].epoch, 2);
    EXPECT_EQ(heard[1].from_step, from);
    EXPECT_EQ(heard[1].live, (std::vector<int>{0, 1}));
    pulled.assign(w[0].data<float>(), w[0].data<float>() + kSize);
    for (int64_t step = from; step < kSteps; ++step) Step(kv.get(), 1, step, &w);
    EXPECT_TRUE(joiner->Finish(60000).ok());
  }();
  worker0.join();
  reader.join();
  for (auto& t : roles) t.join();
  EXPECT_TRUE(scheduler.ok()) << scheduler;
  for (const Status& st : servers) EXPECT_TRUE(st.ok()) << st;

  ASSERT_GT(from, kLeaveAt);
  EXPECT_EQ(pulled, weights[from - 1]) << "the weights after step " << from - 1 << ", no others";
  EXPECT_NE(pulled, weights[from]);
  for (int64_t step = 0; step < kSteps; ++step) {
    EXPECT_EQ(summed[step], step < kLeaveAt || step >= from ? 2 : 1) << "step " << step;
  }
  EXPECT_TRUE(saw_new) << "worker 0's node table still names " << DescribeNode(old_one);
}

}  // namespace
}  // namespace tally
