// The distributed kvstore end to end: a scheduler, servers and workers as threads of this
// process, over the in-process transport and over ZeroMQ on loopback.
#include "kvstore/dist_kvstore.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/local_job.h"

namespace tally {
namespace {

std::unique_ptr<KVStore> MakeStore(KVStoreType type, int devices, Cluster* c) {
  KVStoreSpec spec;
  spec.type = type;
  spec.num_devices = devices;
  spec.cluster = c;
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  return kv;
}

// Sizes that give one key sliced over both servers (above the 4096-element bound) and
// whole keys placed on one server each.
const std::vector<int64_t> kSizes = {100003, 7, 5000, 1};

// A value that differs per worker, device, key and element, not exactly representable.
// Not inlined: a contraction into fused multiply-adds that differed between its callers
// would change the last bit.
__attribute__((noinline)) float Grad(int rank, int device, int key, int64_t i, int step) {
  return 0.1f * static_cast<float>(rank + 1) + 0.01f * static_cast<float>(device) +
         1e-3f * static_cast<float>(key) + 1e-6f * static_cast<float>(i % 1000) + 0.37f * step;
}

Tensor Filled(int64_t n, DType dtype, const std::function<float(int64_t)>& f) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = f(i);
  return t.To(dtype);
}

float Round(float v, DType dtype) {
  if (dtype == DType::kF16) return HalfToFloat(FloatToHalf(v));
  if (dtype == DType::kBF16) return BFloat16ToFloat(FloatToBFloat16(v));
  return v;
}

class DistKVStoreTest : public ::testing::TestWithParam<bool> {};

// No optimizer: the stored value becomes the pushed sum. Each worker sums its two devices
// in fp32 and sends the sum in the gradients' dtype; the servers add the workers in rank
// order in fp32. The expected values repeat that arithmetic exactly.
TEST_P(DistKVStoreTest, PushesSumExactlyInFp32AndFp16AndPullsReturnTheSum) {
  LocalJob job(GetParam(), 2, 2);
  job.Run([](int rank, Cluster* cluster) {
    auto kv = MakeStore(KVStoreType::kDistSync, 2, cluster);
    EXPECT_EQ(kv->rank(), rank);
    EXPECT_EQ(kv->num_workers(), 2);
    std::vector<int> keys;
    std::vector<Tensor> init;
    for (size_t k = 0; k < kSizes.size(); ++k) {
      keys.push_back(static_cast<int>(k));
      init.push_back(Filled(kSizes[k], DType::kF32, [](int64_t i) { return 1.0f; }));
    }
    ASSERT_TRUE(kv->Init(keys, init).ok());
    for (DType dtype : {DType::kF32, DType::kF16}) {
      for (int step = 0; step < 2; ++step) {
        std::vector<std::vector<Tensor>> outs(kSizes.size());
        for (int key : keys) {
          std::vector<Tensor> grads;
          for (int d = 0; d < 2; ++d) {
            grads.push_back(Filled(kSizes[key], dtype, [&](int64_t i) { return Grad(rank, d, key, i, step); }));
            outs[key].push_back(Tensor::Zeros({kSizes[key]}, d == 0 ? dtype : DType::kF32));
          }
          ASSERT_TRUE(kv->PushPull(key, grads, outs[key], -key).ok());
        }
        Status s = kv->WaitAll();
        ASSERT_TRUE(s.ok()) << s;
        for (int key : keys) {
          const Tensor first = outs[key][0].To(DType::kF32);
          for (int64_t i = 0; i < kSizes[key]; ++i) {
            float total = 0;
            for (int r = 0; r < 2; ++r) {
              const float mine = Round(Grad(r, 0, key, i, step), dtype) + Round(Grad(r, 1, key, i, step), dtype);
              total = r == 0 ? Round(mine, dtype) : total + Round(mine, dtype);
            }
            ASSERT_EQ(outs[key][1].data<float>()[i], Round(total, dtype)) << "key " << key << " at " << i;
            ASSERT_EQ(first.data<float>()[i], Round(total, dtype));
          }
        }
      }
    }
  });
}

// Many small keys, issued by the two workers in opposite orders, with a 5 MB key among
// them: every key still sums exactly, in rank order, by PUSHPULL and by PUSH then PULL.
// Counts the requests a worker sends and the slices in them, and takes 200 µs over each,
// like a slow link: requests then wait in the worker's queue, where they can be gathered.
class CountingTransport : public Transport {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, std::atomic<int>* requests, std::atomic<int>* slices)
      : inner_(std::move(inner)), requests_(requests), slices_(slices) {}
  Status Bind(const std::string& h, int p, int* bound) override { return inner_->Bind(h, p, bound); }
  Status Connect(int id, const std::string& h, int p, const std::string& peer) override {
    return inner_->Connect(id, h, p, peer);
  }
  Status Send(int id, const Message& m) override {
    const wire::Command c = m.meta.command();
    if (c == wire::PUSH || c == wire::PULL || c == wire::PUSHPULL) {
      ++*requests_;
      *slices_ += m.meta.slices_size();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return inner_->Send(id, m);
  }
  Status Recv(Message* m, int timeout_ms) override { return inner_->Recv(m, timeout_ms); }
  void Close() override { inner_->Close(); }

 private:
  std::unique_ptr<Transport> inner_;
  std::atomic<int>*requests_, *slices_;
};

// 300 keys, all small but one: the sending thread gathers the small requests waiting for a
// server into requests of several slices, and every sum still comes out exact.
TEST_P(DistKVStoreTest, ManySmallKeysStillSumExactly) {
  LocalJob job(GetParam(), 2, 2);
  std::atomic<int> requests{0}, slices{0};
  job.WrapWorkerTransports([&](std::unique_ptr<Transport> t) {
    return std::make_unique<CountingTransport>(std::move(t), &requests, &slices);
  });
  job.Run([](int rank, Cluster* cluster) {
    auto kv = MakeStore(KVStoreType::kDistSync, 1, cluster);
    constexpr int kKeys = 300;
    auto size = [](int key) -> int64_t { return key == 150 ? (5 << 20) / 4 : 1 + key % 7; };
    std::vector<int> keys;
    std::vector<Tensor> init;
    for (int k = 0; k < kKeys; ++k) {
      keys.push_back(k);
      init.push_back(Tensor::Zeros({size(k)}, DType::kF32));
    }
    ASSERT_TRUE(kv->Init(keys, init).ok());
    if (rank == 1) std::reverse(keys.begin(), keys.end());
    for (int step = 0; step < 3; ++step) {
      std::vector<Tensor> grads(kKeys), outs(kKeys);
      for (int key : keys) {
        grads[key] = Filled(size(key), DType::kF32, [&](int64_t i) { return Grad(rank, 0, key, i, step); });
        outs[key] = Tensor::Zeros({size(key)}, DType::kF32);
        // The last step pushes every key, then pulls every key.
        ASSERT_TRUE((step < 2 ? kv->PushPull(key, {grads[key]}, {outs[key]}, -key) : kv->Push(key, {grads[key]}, -key)).ok());
      }
      if (step == 2) {
        for (int key : keys) ASSERT_TRUE(kv->Pull(key, {outs[key]}, -key).ok());
      }
      Status s = kv->WaitAll();
      ASSERT_TRUE(s.ok()) << s;
      for (int key = 0; key < kKeys; ++key) {
        for (int64_t i = 0; i < size(key); ++i) {
          ASSERT_EQ(outs[key].data<float>()[i], Grad(0, 0, key, i, step) + Grad(1, 0, key, i, step))
              << "step " << step << " key " << key << " at " << i;
        }
      }
    }
  });
  // 2 workers x (2 steps of pushpulls + pushes + pulls) x 301 slices (key 150 is split
  // over both servers), in far fewer requests.
  EXPECT_EQ(slices.load(), 2 * 4 * 301);
  EXPECT_LT(requests.load(), slices.load() / 4) << "small requests were not gathered";
}

// SGD on the servers: fp16 gradients, fp32 master weights, weights pulled in fp16 and fp32.
TEST_P(DistKVStoreTest, Fp16GradientsUpdateFp32MasterWeightsOnTheServers) {
  LocalJob job(GetParam(), 2, 2);
  job.Run([](int rank, Cluster* cluster) {
    auto kv = MakeStore(KVStoreType::kDistSync, 1, cluster);
    OptimizerConfig opt;
    opt.lr = 0.5f;
    opt.momentum = 0.0f;
    opt.wd = 0.0f;
    ASSERT_TRUE(kv->SetOptimizer(opt).ok());
    const int64_t n = kSizes[0];
    ASSERT_TRUE(kv->Init({0}, {Filled(n, DType::kF32, [](int64_t i) { return 1.0f + 1e-4f * (i % 7); })}).ok());
    std::vector<float> master(n);
    for (int64_t i = 0; i < n; ++i) master[i] = 1.0f + 1e-4f * (i % 7);
    for (int step = 0; step < 3; ++step) {
      if (step == 2) kv->SetLearningRate(0.25f);
      const float lr = step == 2 ? 0.25f : 0.5f;
      Tensor g = Filled(n, DType::kF16, [&](int64_t i) { return 1e-4f * (rank + 1) * (1 + i % 3); });
      Tensor w16 = Tensor::Zeros({n}, DType::kF16), w32 = Tensor::Zeros({n}, DType::kF32);
      ASSERT_TRUE(kv->Push(0, {g}).ok());
      ASSERT_TRUE(kv->Pull(0, {w16}).ok());
      ASSERT_TRUE(kv->Pull(0, {w32}).ok());
      ASSERT_TRUE(kv->WaitAll().ok());
      for (int64_t i = 0; i < n; ++i) {
        const float g0 = Round(1e-4f * 1 * (1 + i % 3), DType::kF16), g1 = Round(1e-4f * 2 * (1 + i % 3), DType::kF16);
        master[i] -= lr * (g0 + g1);
        ASSERT_EQ(w32.data<float>()[i], master[i]) << "step " << step << " at " << i;
        ASSERT_EQ(w16.data<uint16_t>()[i], FloatToHalf(master[i]));
      }
    }
  });
}

// Dynamic loss scaling: fp16 gradients pushed 1024 times too large with SetGradientScale(1024)
// update the servers' fp32 weights exactly as the unscaled ones do with scale 1 (a power of
// two scales every rounding of the sums and the update exactly), and a gradient that
// overflows fp16 only once scaled is a non-finite step, skipped on every worker.
TEST_P(DistKVStoreTest, ScaledGradientsUpdateAsUnscaledOnes) {
  for (float scale : {1.0f, 1024.0f}) {
    std::vector<float> final(2);
    LocalJob job(GetParam(), 2, 2);
    job.Run([&](int rank, Cluster* cluster) {
      auto kv = MakeStore(KVStoreType::kDistSync, 1, cluster);
      OptimizerConfig opt;
      opt.lr = 0.5f;
      opt.momentum = 0.9f;
      opt.wd = 1e-4f;
      opt.rescale_grad = 0.5f;
      ASSERT_TRUE(kv->SetOptimizer(opt).ok());
      const int64_t n = kSizes[0];
      ASSERT_TRUE(kv->Init({0}, {Filled(n, DType::kF32, [](int64_t i) { return 1.0f + 1e-4f * (i % 7); })}).ok());
      ASSERT_TRUE(kv->trainer_hooks()->SetGradientScale(scale).ok());
      Tensor w32 = Tensor::Zeros({n}, DType::kF32);
      for (int step = 0; step < 3; ++step) {
        Tensor g = Filled(n, DType::kF16, [&](int64_t i) { return scale * 1e-3f * (rank + 1) * (1 + i % 3); });
        ASSERT_TRUE(kv->PushPull(0, {g}, {w32}).ok());
        ASSERT_TRUE(kv->WaitAll().ok());
      }
      SkippedStep skipped;
      EXPECT_FALSE(kv->trainer_hooks()->TakeSkippedStep(&skipped));
      if (rank == 0) final = {w32.data<float>()[0], w32.data<float>()[n - 1]};
      // The servers' fp32 weights, as a checkpoint of a 16-bit model reads them.
      std::vector<Tensor> masters;
      ASSERT_NE(kv->trainer_hooks()->master_weights(), nullptr);
      ASSERT_TRUE(kv->trainer_hooks()->master_weights()->GetMasterWeights({0}, &masters).ok());
      ASSERT_EQ(masters[0].numel(), n);
      EXPECT_EQ(0, std::memcmp(masters[0].raw_data(), w32.raw_data(), w32.nbytes())) << "worker " << rank;
      // 70 * 1024 overflows fp16 (max 65504): the step is skipped everywhere.
      if (scale > 1.0f) {
        Tensor big = Filled(n, DType::kF16, [](int64_t i) { return 70.0f * 1024.0f; });
        ASSERT_TRUE(kv->PushPull(0, {big}, {w32}).ok());
        ASSERT_TRUE(kv->WaitAll().ok());
        EXPECT_TRUE(kv->trainer_hooks()->TakeSkippedStep(&skipped)) << "worker " << rank;
      }
    });
    static std::vector<float> unscaled;
    if (scale == 1.0f) {
      unscaled = final;
    } else {
      EXPECT_EQ(final, unscaled);
    }
  }
}

// A NaN in worker 1's gradient of one key at step 1: that key's server skips the step and
// says so; both workers then roll step 1 back on every server, so the keys that had been
// updated (on both servers) get their weights and momentum back. Both workers report the
// step, and after step 2 every weight equals, bit for bit, that of a job never sent step 1.
TEST_P(DistKVStoreTest, ANonFiniteStepIsRolledBackOnEveryServer) {
  auto run = [&](bool with_nan, std::vector<std::vector<float>>* weights) {
    weights->assign(kSizes.size(), {});
    LocalJob job(GetParam(), 2, 2);
    job.Run([&](int rank, Cluster* cluster) {
      auto kv = MakeStore(KVStoreType::kDistSync, 1, cluster);
      OptimizerConfig opt;
      opt.lr = 0.5f;
      opt.momentum = 0.9f;
      opt.wd = 0.0f;
      ASSERT_TRUE(kv->SetOptimizer(opt).ok());
      std::vector<int> keys;
      std::vector<Tensor> init, outs;
      for (size_t k = 0; k < kSizes.size(); ++k) {
        keys.push_back(static_cast<int>(k));
        init.push_back(Filled(kSizes[k], DType::kF32, [](int64_t i) { return 1.0f; }));
        outs.push_back(Tensor::Zeros({kSizes[k]}, DType::kF32));
      }
      ASSERT_TRUE(kv->Init(keys, init).ok());
      for (int step : with_nan ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 2}) {
        for (int key : keys) {
          Tensor g = Filled(kSizes[key], DType::kF32, [&](int64_t i) { return Grad(rank, 0, key, i, step); });
          if (with_nan && step == 1 && rank == 1 && key == 2) g.data<float>()[17] = std::nanf("");
          ASSERT_TRUE(kv->PushPull(key, {g}, {outs[key]}, -key).ok());
        }
        Status s = kv->WaitAll();
        ASSERT_TRUE(s.ok()) << s;
        SkippedStep skip;
        const bool skipped = kv->trainer_hooks()->TakeSkippedStep(&skip);
        ASSERT_EQ(skipped, with_nan && step == 1) << "worker " << rank << " step " << step;
        if (skipped) {
          EXPECT_EQ(skip.step, 1);
          EXPECT_EQ(skip.key, 2);
          EXPECT_EQ(skip.workers, std::vector<int>{1});
        }
      }
      if (rank == 0) {
        for (size_t k = 0; k < kSizes.size(); ++k) {
          (*weights)[k].assign(outs[k].data<float>(), outs[k].data<float>() + kSizes[k]);
        }
      }
    });
  };
  std::vector<std::vector<float>> skipped, reference;
  run(true, &skipped);
  run(false, &reference);
  for (size_t k = 0; k < kSizes.size(); ++k) {
    ASSERT_EQ(skipped[k].size(), static_cast<size_t>(kSizes[k]));
    for (int64_t i = 0; i < kSizes[k]; ++i) ASSERT_EQ(skipped[k][i], reference[k][i]) << "key " << k << " at " << i;
  }
}

TEST_P(DistKVStoreTest, MisuseIsRefusedAndAsyncPullsNeedNoStep) {
  LocalJob job(GetParam(), 1, 1);
  job.Run([](int rank, Cluster* cluster) {
    auto kv = MakeStore(KVStoreType::kDistAsync, 1, cluster);
    EXPECT_FALSE(kv->Push(0, {Tensor::Zeros({3}, DType::kF32)}).ok());  // before Init
    ASSERT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({3}, DType::kF32), Tensor::Zeros({2}, DType::kF32)}).ok());
    EXPECT_FALSE(kv->Init({2}, {Tensor::Zeros({3}, DType::kF32)}).ok());  // a second Init
    EXPECT_FALSE(kv->SetOptimizer(OptimizerConfig()).ok());             // after Init
    EXPECT_FALSE(kv->Push(0, {Tensor::Zeros({4}, DType::kF32)}).ok());  // wrong size
    EXPECT_FALSE(kv->Pull(0, {Tensor::Zeros({3}, DType::kI32)}).ok());  // no such wire dtype
    ASSERT_TRUE(kv->Push(1, {Filled(2, DType::kF32, [](int64_t i) { return 3.0f + i; })}).ok());
    Tensor out = Tensor::Zeros({2}, DType::kBF16);
    ASSERT_TRUE(kv->Pull(1, {out}).ok());
    ASSERT_TRUE(kv->WaitAll().ok());
    EXPECT_EQ(BFloat16ToFloat(out.data<uint16_t>()[1]), 4.0f);
  });
  KVStoreSpec spec;
  spec.type = KVStoreType::kDistSync;  // without a Cluster
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_NE(s.message().find("parameter server"), std::string::npos) << s;
}

TEST_P(DistKVStoreTest, WaitAllFailsAtOnceWhenAWorkerDies) {
  const bool zmq = GetParam();
  const int port = TestPort(zmq);
  auto transport = [zmq] { return zmq ? NewZmqTransport() : NewInProcTransport(); };
  Status sched, server;
  std::thread s1([&] { sched = RunScheduler(TestClusterConfig(wire::SCHEDULER, port, 2, 1), transport()); });
  std::thread s2([&] { server = RunServer(TestClusterConfig(wire::SERVER, port, 2, 1), transport()); });
  std::unique_ptr<Cluster> clusters[2];
  std::unique_ptr<KVStore> stores[2];
  std::thread workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = std::thread([&, r] {
      ClusterConfig c = TestClusterConfig(wire::WORKER, port, 2, 1);
      c.rank = r;
      ASSERT_TRUE(Cluster::Join(c, transport(), &clusters[r]).ok());
      stores[r] = MakeStore(KVStoreType::kDistSync, 1, clusters[r].get());
      ASSERT_TRUE(stores[r]->Init({0}, {Tensor::Zeros({4}, DType::kF32)}).ok());
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_TRUE(stores[0] && stores[1]);
  stores[1].reset();
  clusters[1].reset();  // worker 1 falls silent: worker 0's pull can never be answered
  Tensor out = Tensor::Zeros({4}, DType::kF32);
  ASSERT_TRUE(stores[0]->PushPull(0, {Tensor::Zeros({4}, DType::kF32)}, {out}).ok());
  const auto start = std::chrono::steady_clock::now();
  Status s = stores[0]->WaitAll();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("worker 1"), std::string::npos) << s;
  EXPECT_LT(waited, 10000) << "the dead timeout is 3 s";
  stores[0].reset();
  clusters[0].reset();
  s1.join();
  s2.join();
  EXPECT_FALSE(sched.ok());
  EXPECT_FALSE(server.ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, DistKVStoreTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "zmq" : "inproc"; });

}  // namespace
}  // namespace tally
