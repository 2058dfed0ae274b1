// Gradient compression through the distributed kvstore end to end (KVStore::
// SetGradientCompression; docs/wire.md "Compressed pushes"): two workers and two servers as
// threads of this process, over the in-process transport and ZeroMQ on loopback. The
// fixtures' gradients, pushed by their workers, give the fixtures' sums value for value
// (no optimizer: the values become each step's sum); a key sliced over both servers, whose
// slices start at values that are no multiple of 16, gives what one worker-side Quantize of
// the whole key gives.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "compress/compress.h"
#include "kvstore/dist_kvstore.h"
#include "tests/compress/compress_fixture.h"
#include "tests/local_job.h"
#include "tests/models/resnet50_sizes.h"

namespace tally {
namespace {

using testing::CompressionCase;

constexpr int64_t kBig = 100003;  // above the slicing bound: one slice per server

std::unique_ptr<KVStore> MakeStore(KVStoreType type, Cluster* c) {
  KVStoreSpec spec;
  spec.type = type;
  spec.cluster = c;
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  return kv;
}

Tensor FromFloats(const std::vector<float>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::memcpy(t.raw_data(), v.data(), v.size() * 4);
  return t;
}

float BigGrad(int rank, int64_t i, int step) {
  return static_cast<float>(((i * 7919 + rank * 104729 + step * 1299709) % 2001) - 1000) / 1250.0f;
}

// Worker `rank` pushes each case's gradients (key = the case's index) and the big key's for
// every step, and checks what it pulls.
void RunWorker(KVStoreType type, int rank, Cluster* cluster, const std::vector<CompressionCase>& cases) {
  auto kv = MakeStore(type, cluster);
  ASSERT_TRUE(kv->SetGradientCompression(cases[0].config).ok());
  std::vector<int> keys;
  std::vector<Tensor> init;
  for (size_t k = 0; k < cases.size(); ++k) {
    keys.push_back(static_cast<int>(k));
    init.push_back(Tensor::Zeros({cases[k].n}, DType::kF32));
  }
  keys.push_back(static_cast<int>(cases.size()));
  init.push_back(Tensor::Zeros({kBig}, DType::kF32));
  ASSERT_TRUE(kv->Init(keys, init).ok());
  // The big key's reference: both workers' residuals and one Quantize of the whole key each.
  std::vector<std::vector<float>> residual(2, std::vector<float>(kBig, 0.0f));
  for (size_t step = 0; step < cases[0].pushes.size(); ++step) {
    std::vector<Tensor> outs;
    for (size_t k = 0; k < cases.size(); ++k) {
      outs.push_back(Tensor::Zeros({cases[k].n}, DType::kF32));
      ASSERT_TRUE(kv->PushPull(keys[k], {FromFloats(cases[k].pushes[step].grads[rank])}, {outs.back()}).ok());
    }
    std::vector<float> big(kBig);
    for (int64_t i = 0; i < kBig; ++i) big[i] = BigGrad(rank, i, static_cast<int>(step));
    outs.push_back(Tensor::Zeros({kBig}, DType::kF32));
    ASSERT_TRUE(kv->PushPull(keys.back(), {FromFloats(big)}, {outs.back()}).ok());
    Status s = kv->WaitAll();
    ASSERT_TRUE(s.ok()) << s;
    for (size_t k = 0; k < cases.size(); ++k) {
      for (int64_t i = 0; i < cases[k].n; ++i) {
        ASSERT_TRUE(testing::SameBits(outs[k].data<float>()[i], cases[k].pushes[step].sum[i]))
            << cases[k].name << " step " << step << " value " << i;
      }
    }
    std::vector<float> want(kBig, 0.0f), values(kBig);
    std::vector<uint8_t> packed(PackedBytes(cases[0].config.type, kBig));
    for (int r = 0; r < 2; ++r) {
      for (int64_t i = 0; i < kBig; ++i) big[i] = BigGrad(r, i, static_cast<int>(step));
      Quantize(cases[0].config, big.data(), residual[r].data(), kBig, packed.data());
      Dequantize(cases[0].config, packed.data(), kBig, values.data());
      for (int64_t i = 0; i < kBig; ++i) want[i] += values[i];
    }
    ASSERT_EQ(std::memcmp(outs.back().raw_data(), want.data(), kBig * 4), 0) << "the big key, step " << step;
  }
}

class DistCompressionTest : public ::testing::TestWithParam<bool> {};

// The fixtures' cases of one compression (one threshold): a store has one.
std::vector<CompressionCase> CasesOf(const char* type, float threshold) {
  std::vector<CompressionCase> out;
  for (const CompressionCase& c : testing::LoadCompressionFixtures()) {
    if (c.config.threshold == threshold && CompressionName(c.config.type) == std::string(type)) out.push_back(c);
  }
  return out;
}

TEST_P(DistCompressionTest, TwoBitSumsAreTheFixtures) {
  const std::vector<CompressionCase> cases = CasesOf("2bit", 0.5f);
  ASSERT_EQ(cases.size(), 2u);
  LocalJob job(GetParam(), 2, 2);
  job.Run([&](int rank, Cluster* cluster) { RunWorker(KVStoreType::kDistSync, rank, cluster, cases); });
}

TEST_P(DistCompressionTest, OneBitSumsAreTheFixturesUnderDistDeviceSync) {
  const std::vector<CompressionCase> cases = CasesOf("1bit", 0.0f);
  ASSERT_EQ(cases.size(), 1u);
  LocalJob job(GetParam(), 2, 2);
  job.Run([&](int rank, Cluster* cluster) { RunWorker(KVStoreType::kDistDeviceSync, rank, cluster, cases); });
}

// CompressionConfig::scale (what `tally train` sets: it pushes batch means, MXNet's thresholds
// are for batch sums): gradients a quarter of the fixtures' with scale 4 cross the threshold
// as the fixtures' do, and SGD (lr 1) on the server applies the fixtures' sums divided by 4.
TEST(DistCompressionScale, PushesAreQuantisedInTheScaledUnits) {
  const std::vector<CompressionCase> cases = CasesOf("2bit", 0.5f);
  LocalJob job(false, 2, 1);
  job.Run([&](int rank, Cluster* cluster) {
    auto kv = MakeStore(KVStoreType::kDistSync, cluster);
    OptimizerConfig sgd;
    sgd.type = "sgd";
    sgd.lr = 1.0f;
    sgd.momentum = 0.0f;
    sgd.wd = 0.0f;
    ASSERT_TRUE(kv->SetOptimizer(sgd).ok());
    CompressionConfig gc = cases[0].config;
    gc.scale = 4.0f;
    ASSERT_TRUE(kv->SetGradientCompression(gc).ok());
    const CompressionCase& c = cases[1];  // 300 values
    ASSERT_TRUE(kv->Init(0, Tensor::Zeros({c.n}, DType::kF32)).ok());
    std::vector<double> want(c.n, 0.0);
    for (size_t step = 0; step < c.pushes.size(); ++step) {
      std::vector<float> quarter = c.pushes[step].grads[rank];
      for (float& g : quarter) g /= 4.0f;
      Tensor out = Tensor::Zeros({c.n}, DType::kF32);
      ASSERT_TRUE(kv->PushPull(0, {FromFloats(quarter)}, {out}).ok());
      ASSERT_TRUE(kv->WaitAll().ok());
      for (int64_t i = 0; i < c.n; ++i) {
        want[i] -= c.pushes[step].sum[i] / 4.0;
        ASSERT_NEAR(out.data<float>()[i], want[i], 1e-5) << "step " << step << " value " << i;
      }
    }
  });
}

// dist_async: each compressed push is dequantised and applied on its own; with SGD (lr 1) the
// values end at minus the sum of every push's dequantised values, whatever their order.
TEST(DistCompressionAsync, EveryPushIsAppliedDequantised) {
  const std::vector<CompressionCase> cases = CasesOf("2bit", 0.5f);
  const CompressionCase& c = cases[1];
  LocalJob job(false, 2, 1);
  job.Run([&](int rank, Cluster* cluster) {
    auto kv = MakeStore(KVStoreType::kDistAsync, cluster);
    OptimizerConfig sgd;
    sgd.type = "sgd";
    sgd.lr = 1.0f;
    sgd.momentum = 0.0f;
    sgd.wd = 0.0f;
    ASSERT_TRUE(kv->SetOptimizer(sgd).ok());
    ASSERT_TRUE(kv->SetGradientCompression(c.config).ok());
    ASSERT_TRUE(kv->Init(0, Tensor::Zeros({c.n}, DType::kF32)).ok());
    for (size_t step = 0; step < c.pushes.size(); ++step) {
      ASSERT_TRUE(kv->Push(0, {FromFloats(c.pushes[step].grads[rank])}).ok());
    }
    ASSERT_TRUE(kv->WaitAll().ok());
    ASSERT_TRUE(kv->Barrier().ok());  // both workers' pushes are applied
    Tensor out = Tensor::Zeros({c.n}, DType::kF32);
    ASSERT_TRUE(kv->Pull(0, {out}).ok());
    ASSERT_TRUE(kv->WaitAll().ok());
    for (int64_t i = 0; i < c.n; ++i) {
      float want = 0.0f;
      for (const auto& push : c.pushes) want -= push.sum[i];  // multiples of 0.5: exact in any order
      ASSERT_EQ(out.data<float>()[i], want) << "value " << i;
    }
  });
}

// `device` with 2 CPU devices compresses between them as MXNet's device kvstore does: device
// d's gradients are the fixtures' worker d's, and the sums are the fixtures' (no optimizer).
TEST(DeviceCompression, TwoDevicesSumTheFixturesDequantisedPushes) {
  const std::vector<CompressionCase> cases = CasesOf("2bit", 0.5f);
  KVStoreSpec spec;
  spec.type = KVStoreType::kDevice;
  spec.num_devices = 2;
  std::unique_ptr<KVStore> kv;
  ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
  ASSERT_TRUE(kv->SetGradientCompression(cases[0].config).ok());
  for (size_t k = 0; k < cases.size(); ++k) {
    ASSERT_TRUE(kv->Init(static_cast<int>(k), Tensor::Zeros({cases[k].n}, DType::kF32)).ok());
  }
  for (size_t step = 0; step < cases[0].pushes.size(); ++step) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const auto& push = cases[k].pushes[step];
      std::vector<Tensor> outs = {Tensor::Zeros({cases[k].n}, DType::kF32), Tensor::Zeros({cases[k].n}, DType::kF32)};
      ASSERT_TRUE(kv->PushPull(static_cast<int>(k), {FromFloats(push.grads[0]), FromFloats(push.grads[1])}, outs).ok());
      for (const Tensor& out : outs) {
        ASSERT_EQ(std::memcmp(out.raw_data(), push.sum.data(), cases[k].n * 4), 0) << cases[k].name << " step " << step;
      }
    }
  }
  EXPECT_FALSE(kv->SetGradientCompression(cases[0].config).ok()) << "set after the first push";
}

TEST(DistCompressionRules, SingleProcessTypesRefuse) {
  KVStoreSpec spec;
  spec.type = KVStoreType::kLocal;
  std::unique_ptr<KVStore> kv;
  ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
  CompressionConfig gc;
  ASSERT_TRUE(ParseCompression("2bit", 0.5f, &gc).ok());
  Status s = kv->SetGradientCompression(gc);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dist_"), std::string::npos) << s;
  EXPECT_TRUE(kv->SetGradientCompression(CompressionConfig()).ok());  // none: nothing to refuse
}

// Counts the bytes of the PUSH and PUSHPULL messages a worker hands its transport: the
// Meta's protobuf and the data frames (what the wire carries, less the transport's own
// framing and, when secured, its 16-byte tag per frame).
class PushBytesTransport : public Transport {
 public:
  PushBytesTransport(std::unique_ptr<Transport> inner, std::atomic<int64_t>* bytes)
      : inner_(std::move(inner)), bytes_(bytes) {}
  Status Bind(const std::string& h, int p, int* bound) override { return inner_->Bind(h, p, bound); }
  Status Connect(int id, const std::string& h, int p, const std::string& peer) override {
    return inner_->Connect(id, h, p, peer);
  }
  Status Send(int id, const Message& m) override {
    if (m.meta.command() == wire::PUSH || m.meta.command() == wire::PUSHPULL) {
      *bytes_ += static_cast<int64_t>(m.meta.ByteSizeLong() + DataBytes(m));
    }
    return inner_->Send(id, m);
  }
  Status Recv(Message* m, int timeout_ms) override { return inner_->Recv(m, timeout_ms); }
  void Close() override { inner_->Close(); }

 private:
  std::unique_ptr<Transport> inner_;
  std::atomic<int64_t>* bytes_;
};

// Bytes on the wire of one ResNet-50 step's pushes (161 arrays, 25.6 M values) from one worker
// to 2 servers: fp32, fp16 and 2bit. 2bit must be a sixteenth of fp32 plus the headers.
TEST(DistCompressionBytes, OneResNet50StepOfPushes) {
  const std::vector<int64_t> sizes = testing::ResNet50ParameterSizes();
  int64_t values = 0;
  for (int64_t n : sizes) values += n;
  int64_t bytes[3] = {0, 0, 0};
  for (int mode = 0; mode < 3; ++mode) {
    std::atomic<int64_t> counted{0};
    LocalJob job(false, 1, 2);
    job.WrapWorkerTransports([&counted](std::unique_ptr<Transport> t) {
      return std::unique_ptr<Transport>(new PushBytesTransport(std::move(t), &counted));
    });
    job.Run([&](int rank, Cluster* cluster) {
      auto kv = MakeStore(KVStoreType::kDistSync, cluster);
      CompressionConfig gc;
      ASSERT_TRUE(ParseCompression(mode == 2 ? "2bit" : "none", 0.5f, &gc).ok());
      ASSERT_TRUE(kv->SetGradientCompression(gc).ok());
      std::vector<int> keys;
      std::vector<Tensor> init, grads;
      for (size_t k = 0; k < sizes.size(); ++k) {
        keys.push_back(static_cast<int>(k));
        init.push_back(Tensor::Zeros({sizes[k]}, DType::kF32));
        grads.push_back(Tensor::Zeros({sizes[k]}, mode == 1 ? DType::kF16 : DType::kF32));
      }
      ASSERT_TRUE(kv->Init(keys, init).ok());
      for (int key : keys) ASSERT_TRUE(kv->Push(key, {grads[key]}, -key).ok());
      ASSERT_TRUE(kv->WaitAll().ok());
    });
    bytes[mode] = counted;
  }
  std::printf("ResNet-50, %lld values in %zu arrays, one step's pushes of one worker to 2 servers: "
              "fp32 %lld bytes, fp16 %lld, 2bit %lld (fp32 / 2bit = %.2f)\n",
              static_cast<long long>(values), sizes.size(), static_cast<long long>(bytes[0]),
              static_cast<long long>(bytes[1]), static_cast<long long>(bytes[2]),
              static_cast<double>(bytes[0]) / static_cast<double>(bytes[2]));
  EXPECT_GE(bytes[0], values * 4);
  // A sixteenth of the values' bytes, at most 4 bytes of padding per slice and the Metas.
  EXPECT_LE(bytes[2] - (bytes[0] - values * 4), values / 4 + 4 * 4 * static_cast<int64_t>(sizes.size()) * 4);
  EXPECT_LT(bytes[2] * 15, bytes[0]);
}

INSTANTIATE_TEST_SUITE_P(Transports, DistCompressionTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Zmq" : "InProc"; });

}  // namespace
}  // namespace tally
