// Landings (net/landing.h): a large pull's answer read from the socket straight into the
// array that asked for it, claimed once, refused when it differs, and never written once
// its request is finished; end to end through a job on loopback.
#include "net/landing.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvstore/kvstore.h"
#include "net/requests.h"
#include "net/transport.h"
#include "tests/local_job.h"

namespace tally {
namespace {

TEST(Landings, AFrameClaimsItsLandingOnceWithItsExactSizeAndDtype) {
  Landings& l = Landings::Get();
  float dst[4];
  const LandingKey key{40001, 5, 17};
  l.Add(key, dst, sizeof dst, wire::F32);
  EXPECT_TRUE(l.Any(40001));
  EXPECT_FALSE(l.Any(40002));
  EXPECT_EQ(l.Claim(LandingKey{40001, 5, 18}, sizeof dst, wire::F32), nullptr);  // another request
  EXPECT_EQ(l.Claim(LandingKey{40001, 6, 17}, sizeof dst, wire::F32), nullptr);  // another node
  EXPECT_EQ(l.Claim(key, sizeof dst - 4, wire::F32), nullptr);                   // another size
  EXPECT_EQ(l.Claim(key, sizeof dst, wire::F16), nullptr);                       // another dtype
  const int64_t landed = l.landed();
  EXPECT_EQ(l.Claim(key, sizeof dst, wire::F32), dst);
  EXPECT_EQ(l.Claim(key, sizeof dst, wire::F32), nullptr);  // a repeated answer: its own buffer
  l.Landed(key);
  EXPECT_EQ(l.landed(), landed + 1);
  l.Remove(key);
  EXPECT_FALSE(l.Any(40001));
  l.Add(key, dst, sizeof dst, wire::F32);
  l.Remove(key);
  EXPECT_EQ(l.Claim(key, sizeof dst, wire::F32), nullptr);  // removed before its answer came
}

// A request finished while its answer's frame is being read into the array (the request
// dropped, its server lost): Remove returns only once the frame has ended.
TEST(Landings, RemoveWaitsForAFrameBeingRead) {
  Landings& l = Landings::Get();
  float dst[4];
  const LandingKey key{40003, 5, 1};
  l.Add(key, dst, sizeof dst, wire::F32);
  ASSERT_EQ(l.Claim(key, sizeof dst, wire::F32), dst);
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    l.Remove(key);
    removed = true;
  });
  // It must not return while the frame is read: watch it for a while.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until && !removed) std::this_thread::yield();
  EXPECT_FALSE(removed);
  l.Landed(key);
  remover.join();
  EXPECT_TRUE(removed);
  EXPECT_FALSE(l.Any(40003));
}

// A removed landing whose frame is still being read (NodeLost) goes once the frame ends.
TEST(Landings, RemovedWithoutWaitingGoesWhenItsFrameEnds) {
  Landings& l = Landings::Get();
  float dst[4];
  const LandingKey key{40004, 5, 1};
  l.Add(key, dst, sizeof dst, wire::F32);
  ASSERT_EQ(l.Claim(key, sizeof dst, wire::F32), dst);
  l.Remove(key, /*wait=*/false);
  EXPECT_TRUE(l.Any(40004));
  l.Landed(key);
  EXPECT_FALSE(l.Any(40004));
}

// A large pull registers its landing when sent; requests dropped unanswered with their
// Requests take their landings with them (a later job may reuse the port and the ids).
TEST(Landings, RequestsRegisterLargePullsAndWithdrawThemWhenGone) {
  const int port = 40005;
  RequestLinks links;
  links.unacked = [](int) { return int64_t{0}; };
  links.send = [](int, Message&&) { return Status::Ok(); };
  links.failure = [] { return Status::Ok(); };
  links.name = [](int node) { return "server " + std::to_string(node); };
  links.landing_port = port;
  links.landing_node = 9;
  auto pull = [](Requests* r, int64_t length) {
    auto op = std::make_shared<PullOp>();
    op->flat = Tensor::Zeros({length}, DType::kF32);
    op->remaining = 1;
    Message m;
    m.meta.set_command(wire::PULL);
    m.meta.set_pull_dtype(wire::F32);
    wire::KeySlice* ks = m.meta.add_slices();
    ks->set_key(3);
    ks->set_length(static_cast<uint64_t>(length));
    PendingRequest p;
    p.command = wire::PULL;
    p.key = 3;
    p.pull = op;
    p.length = length;
    r->Send(/*node=*/1, std::move(m), /*priority=*/0, std::move(p));
    return op;
  };
  {
    Requests requests(links, RequestOptions(), nullptr);
    auto small = pull(&requests, 1000);  // 4 KB: may be gathered, never landed
    EXPECT_FALSE(Landings::Get().Any(port));
    auto large = pull(&requests, 100000);
    EXPECT_TRUE(Landings::Get().Any(port));
    EXPECT_EQ(Landings::Get().Claim(LandingKey{port, 9, 2}, 100000 * 4, wire::F32), large->flat.raw_data());
    Landings::Get().Landed(LandingKey{port, 9, 2});
    EXPECT_EQ(requests.outstanding(), 2u);
  }
  EXPECT_FALSE(Landings::Get().Any(port));
}

Tensor Ramp(int64_t n, DType dtype, float step) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = 0.001f * static_cast<float>(i % 5000) + step;
  return t.To(dtype);
}

// A job on loopback, plain or secure (sealed answers opened into the array), one worker,
// two servers, no optimizer (a key's value becomes the pushed sum): the large key's answers
// land in the worker's arrays, fp32 and fp16, the small key's (gathered) do not, and every
// pulled value is the pushed one.
class LandingJobTest : public ::testing::TestWithParam<bool> {};

void PushPullAndCheck(Cluster* cluster) {
  const std::vector<int64_t> sizes = {300001, 7};  // sliced over both servers; small, gathered
  KVStoreSpec spec;
  spec.type = KVStoreType::kDistSync;
  spec.cluster = cluster;
  std::unique_ptr<KVStore> kv;
  ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
  const std::vector<int> keys = {0, 1};
  ASSERT_TRUE(kv->Init(keys, {Ramp(sizes[0], DType::kF32, 0), Ramp(sizes[1], DType::kF32, 0)}).ok());
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (int step = 1; step <= 3; ++step) {
      std::vector<Tensor> grads, outs;
      for (int k : keys) {
        grads.push_back(Ramp(sizes[k], dtype, static_cast<float>(step)));
        outs.push_back(Tensor::Zeros({sizes[k]}, dtype));
        ASSERT_TRUE(kv->PushPull(k, {grads[k]}, {outs[k]}, -k).ok());
      }
      Status s = kv->WaitAll();
      ASSERT_TRUE(s.ok()) << s;
      for (int k : keys) {
        ASSERT_EQ(std::memcmp(outs[k].raw_data(), grads[k].raw_data(), grads[k].nbytes()), 0)
            << "key " << k << " step " << step << " " << DTypeName(dtype);
      }
    }
  }
}

TEST_P(LandingJobTest, LargePullsLandInTheirArraysAndHoldThePushedValues) {
  const int64_t landed = Landings::Get().landed();
  const int port = TestPort(/*zmq=*/true);
  const std::string secret = GetParam() ? std::string(32, 's') : "";
  auto config = [&](wire::Role role, int rank) {
    ClusterConfig c = TestClusterConfig(role, port, /*workers=*/1, /*servers=*/2);
    c.rank = rank;
    c.job_secret = secret;
    return c;
  };
  auto transport = [](const ClusterConfig& c) {
    std::unique_ptr<Transport> t;
    EXPECT_TRUE(NewJobTransport(c, &t).ok());
    return t;
  };
  Status sched, servers[2];
  std::thread scheduler([&] { sched = RunScheduler(config(wire::SCHEDULER, 0), transport(config(wire::SCHEDULER, 0))); });
  std::vector<std::thread> server_threads;
  for (int i = 0; i < 2; ++i) {
    server_threads.emplace_back([&, i] { servers[i] = RunServer(config(wire::SERVER, i), transport(config(wire::SERVER, i))); });
  }
  std::unique_ptr<Cluster> cluster;
  Status joined = Cluster::Join(config(wire::WORKER, 0), transport(config(wire::WORKER, 0)), &cluster);
  EXPECT_TRUE(joined.ok()) << joined;
  if (joined.ok()) {
    PushPullAndCheck(cluster.get());
    EXPECT_TRUE(cluster->Finish(20000).ok());
  }
  cluster.reset();
  for (auto& t : server_threads) t.join();
  scheduler.join();
  EXPECT_TRUE(sched.ok()) << sched;
  for (const Status& s : servers) EXPECT_TRUE(s.ok()) << s;
  // 2 dtypes x 3 steps x the large key's 2 slices (and whatever Init pulled).
  EXPECT_GE(Landings::Get().landed() - landed, 12);
}

INSTANTIATE_TEST_SUITE_P(Transports, LandingJobTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "secure" : "plain"; });

}  // namespace
}  // namespace tally
