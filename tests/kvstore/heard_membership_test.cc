// A worker hears of every membership change its answers were decided under (--elastic; a
// job of threads: a scheduler, a server, two workers over the in-process transport): worker
// 1 leaves before step 3, and from the answers of step 3 on worker 0's HeardMembership
// holds that change, its pulled sums count one worker and summed_workers says so.
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

constexpr int64_t kLeaveAt = 3;
constexpr int kSteps = 8;

std::unique_ptr<KVStore> DistSync(Cluster* c) {
  KVStoreSpec spec;
  spec.type = KVStoreType::kDistSync;
  spec.cluster = c;
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  return kv;
}

// One step: pushes ones, pulls the sum (no optimizer: the values are the sum).
float Step(KVStore* kv) {
  Tensor ones = Tensor::Empty({16}, DType::kF32), out = Tensor::Zeros({16}, DType::kF32);
  for (int i = 0; i < 16; ++i) ones.data<float>()[i] = 1.0f;
  EXPECT_TRUE(kv->PushPull(0, {ones}, {out}).ok());
  Status s = kv->WaitAll();
  EXPECT_TRUE(s.ok()) << s;
  return out.data<float>()[0];
}

TEST(HeardMembership, FromTheLeaversStepOnTheAnswersBringTheChangeWithThem) {
  const int port = TestPort(false);
  SchedulerOptions options;
  options.elastic = true;
  Status scheduler, server;
  std::thread roles[2] = {
      std::thread([&] {
        scheduler = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 1), NewInProcTransport(), nullptr,
                                 nullptr, options);
      }),
      std::thread([&] {
        ElasticOptions e;
        e.elastic = true;
        server = RunServer(TestClusterConfig(wire::SERVER, port, 2, 1), NewInProcTransport(), ServerObserver(), e);
      })};
  std::vector<float> sums(kSteps);
  std::vector<int> summed(kSteps);
  std::vector<std::vector<MembershipView::Membership>> heard(kSteps);
  auto worker = [&](int rank) {
    ClusterConfig c = TestClusterConfig(wire::WORKER, port, 2, 1);
    c.rank = rank;
    std::unique_ptr<Cluster> cluster;
    ASSERT_TRUE(Cluster::Join(c, NewInProcTransport(), &cluster).ok());
    std::unique_ptr<KVStore> kv = DistSync(cluster.get());
    ASSERT_TRUE(kv->Init({0}, {Tensor::Zeros({16}, DType::kF32)}).ok());
    for (int step = 0; step < (rank == 0 ? kSteps : kLeaveAt); ++step) {
      const float sum = Step(kv.get());
      if (rank != 0) continue;
      sums[step] = sum;
      summed[step] = kv->membership_view()->summed_workers();
      Status s = kv->membership_view()->HeardMembership(&heard[step]);
      EXPECT_TRUE(s.ok()) << s;
    }
    if (rank == 1) {
      Message m;
      m.meta.set_command(wire::LEAVE);
      m.meta.set_step(kLeaveAt);
      ASSERT_TRUE(cluster->Send(kSchedulerId, std::move(m)).ok());
    }
    Status s = cluster->Finish(60000);
    EXPECT_TRUE(s.ok()) << "worker " << rank << ": " << s;
    kv.reset();
  };
  std::thread w1(worker, 1);
  worker(0);
  w1.join();
  for (auto& t : roles) t.join();
  EXPECT_TRUE(scheduler.ok()) << scheduler;
  EXPECT_TRUE(server.ok()) << server;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const bool after = step >= kLeaveAt;
    EXPECT_EQ(sums[step], after ? 1.0f : 2.0f);
    EXPECT_EQ(summed[step], after ? 1 : 2);
    if (!after) continue;  // before: the change may or may not be heard of yet
    ASSERT_EQ(heard[step].size(), 1u);
    EXPECT_EQ(heard[step][0].epoch, 1);
    EXPECT_EQ(heard[step][0].from_step, kLeaveAt);
    EXPECT_EQ(heard[step][0].live, std::vector<int>{0});
  }
}

}  // namespace
}  // namespace tally
