// Gradient compression in the `device` store on GPUs (kvstore/gpu_compressed_reduce.h),
// held bit for bit to the host's `device` store with as many CPU devices fed the same
// gradients: each device quantises with its own residual, the bits are summed dequantised
// in device order. SGD with lr 1 and nothing else turns each step's sum into the weights
// exactly, so equal weights mean equal sums; a step where one device's gradient holds a
// NaN is skipped by both. The summing kernel is also held to the host's Dequantize and sum.
// Skipped, saying so, without a GPU (with one GPU, one device each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "compress/compress.h"
#include "kvstore/kvstore.h"
#include "ops/device.h"
#include "tests/ops/cuda_compare.h"

#ifdef TALLY_HAVE_CUDA
#include "compress/cuda/quantize.h"
#endif

namespace tally {
namespace {

constexpr int kSteps = 4;
constexpr int kNanStep = 2;
const std::vector<int64_t> kSizes = {70001, 37};

Tensor On(const Tensor& t, Device dev) {
  if (t.device() == dev) return t;
  Tensor x = Tensor::Empty(t.shape(), t.dtype(), dev);
  x.CopyFrom(t);
  return x;
}

// Device d's fp16 gradient of key `key` at `step`; the last device's key 0 has a NaN at
// kNanStep.
Tensor Grad(int d, int devices, int step, int key) {
  const int64_t n = kSizes[key];
  Tensor g = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    g.data<float>()[i] =
        static_cast<float>(((i * 7919 + d * 104729 + step * 1299709 + key * 31) % 2001) - 1000) / 1250.0f;
  }
  if (key == 0 && d == devices - 1 && step == kNanStep) g.data<float>()[n / 2] = std::nanf("");
  return g.To(DType::kF16);
}

OptimizerConfig PlainSgd() {
  OptimizerConfig c;
  c.type = "sgd";
  c.lr = 1.0f;
  c.momentum = 0.0f;
  c.wd = 0.0f;
  return c;
}

CompressionConfig Gc() {
  CompressionConfig gc;
  EXPECT_TRUE(ParseCompression("2bit", 0.5f, &gc).ok());
  gc.scale = 16.0f;
  return gc;
}

struct JobResult {
  std::vector<std::vector<std::vector<Tensor>>> weights;  // [step][key][device], host fp32
  std::vector<int64_t> skipped;
};

// The job on `devices` (GPUs) or on that many CPU devices (cpu_devices > 0).
JobResult RunJob(const std::vector<Device>& gpus, int cpu_devices) {
  JobResult run;
  KVStoreSpec spec;
  spec.type = KVStoreType::kDevice;
  if (cpu_devices > 0) spec.num_devices = cpu_devices;
  else spec.gpus = gpus;
  const int devices = cpu_devices > 0 ? cpu_devices : static_cast<int>(gpus.size());
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return run;
  EXPECT_TRUE(kv->SetOptimizer(PlainSgd()).ok());
  EXPECT_TRUE(kv->SetGradientCompression(Gc()).ok());
  EXPECT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({kSizes[0]}, DType::kF32), Tensor::Zeros({kSizes[1]}, DType::kF32)}).ok());
  auto dev = [&](int d) { return cpu_devices > 0 ? Device::Cpu() : gpus[d]; };
  std::vector<std::vector<Tensor>> weights(2);
  for (int key = 0; key < 2; ++key) {
    for (int d = 0; d < devices; ++d) weights[key].push_back(Tensor::Zeros({kSizes[key]}, DType::kF32, dev(d)));
  }
  for (int step = 0; step < kSteps; ++step) {
    for (int key = 0; key < 2; ++key) {
      std::vector<Tensor> grads;
      for (int d = 0; d < devices; ++d) grads.push_back(On(Grad(d, devices, step, key), dev(d)));
      s = kv->PushPull(key, grads, weights[key], -key);
      EXPECT_TRUE(s.ok()) << s;
    }
    s = kv->WaitAll();
    EXPECT_TRUE(s.ok()) << s;
    SkippedStep skip;
    if (kv->trainer_hooks()->TakeSkippedStep(&skip)) run.skipped.push_back(skip.step);
    if (cpu_devices > 0) {  // the values after a rollback
      for (int key = 0; key < 2; ++key) EXPECT_TRUE(kv->Pull(key, weights[key], -key).ok());
    }
    std::vector<std::vector<Tensor>> host(2);
    for (int key = 0; key < 2; ++key) {
      for (const Tensor& w : weights[key]) host[key].push_back(On(w, Device::Cpu()).Clone());
    }
    run.weights.push_back(host);
  }
  EXPECT_FALSE(kv->SetGradientCompression(Gc()).ok()) << "set after the first push";
  return run;
}

TEST(GpuDeviceCompression, GpusSumAsTheHostsDeviceStore) {
  TALLY_REQUIRE_GPU();
  std::vector<Device> gpus;
  for (int i = 0; i < std::min(2, CudaDeviceCount()); ++i) gpus.push_back(Device{Device::Kind::kCuda, i});
  const JobResult host = RunJob({}, static_cast<int>(gpus.size()));
  const JobResult gpu = RunJob(gpus, 0);
  EXPECT_EQ(host.skipped, std::vector<int64_t>{kNanStep});
  EXPECT_EQ(gpu.skipped, host.skipped);
  ASSERT_EQ(gpu.weights.size(), host.weights.size());
  for (size_t step = 0; step < host.weights.size(); ++step) {
    for (size_t key = 0; key < 2; ++key) {
      for (size_t d = 0; d < gpus.size(); ++d) {
        const Tensor& g = gpu.weights[step][key][d];
        const Tensor& h = host.weights[step][key][d];
        EXPECT_EQ(std::memcmp(g.raw_data(), h.raw_data(), h.nbytes()), 0)
            << "step " << step << " key " << key << " device " << d;
      }
    }
  }
}

TEST(GpuDeviceCompression, LocalOnGpusRefuses) {
  TALLY_REQUIRE_GPU();
  KVStoreSpec spec;
  spec.type = KVStoreType::kLocal;
  spec.gpus = {testing::Gpu()};
  std::unique_ptr<KVStore> kv;
  ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
  Status s = kv->SetGradientCompression(Gc());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("device"), std::string::npos) << s;
}

// DequantizeAddOnGpu over three devices' bits: the host's Dequantize and fp32 sum in that
// order, divided by the scale at the end, bit for bit.
TEST(GpuDeviceCompression, DequantizeAddIsTheHostsSum) {
  TALLY_REQUIRE_GPU();
#ifdef TALLY_HAVE_CUDA
  const CompressionConfig gc = Gc();
  const int64_t n = 1001;
  const Device gpu = testing::Gpu();
  Tensor want = Tensor::Zeros({n}, DType::kF32), values = Tensor::Empty({n}, DType::kF32);
  Tensor sum = Tensor::Empty({n}, DType::kF32, gpu);
  std::vector<float> residual(n, 0.0f);
  for (int d = 0; d < 3; ++d) {
    const Tensor g = Grad(d, 3, 0, 0).To(DType::kF32).Slice(0, n);
    Tensor packed = Tensor::Empty({PackedBytes(gc.type, n)}, DType::kU8);
    Quantize(gc, g.data<float>(), residual.data(), n, packed.data<uint8_t>());
    Dequantize(gc, packed.data<uint8_t>(), n, values.data<float>());
    for (int64_t i = 0; i < n; ++i) want.data<float>()[i] += values.data<float>()[i];
    const Tensor on_gpu = On(packed, gpu);
    Synchronize(gpu);  // the copy, queued on the device's stream, before the kernel on the default one
    DequantizeAddOnGpu(gc, on_gpu.data<uint8_t>(), n, sum.data<float>(), d == 0, d == 2 ? gc.scale : 1.0f, nullptr);
    Synchronize(gpu);
  }
  for (int64_t i = 0; i < n; ++i) want.data<float>()[i] /= gc.scale;
  const Tensor got = On(sum, Device::Cpu());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), n * 4), 0);
#endif
}

}  // namespace
}  // namespace tally
