// Pushes of gradients quantised before the dist store (kvstore/packed_push.h), the path of a
// GPU worker's compressed pushes: the slices' layout, the host-side split of the packed
// words, and one job pushed three ways that must end in the same weights bit for bit:
//   - the dist store's own compressed PushPull (the CPU worker);
//   - QuantizeSlices on the host and PushPullPacked (the GPU path with the CPU doing the
//     GPU's part: runs everywhere);
//   - GpuDistKVStore on cuda:0, quantising with QuantizeSlicesOnGpu (skipped without a GPU).
// The job: two workers, two servers, fp16 gradients under a loss scale of 8 and a
// compression scale of 64, a key sliced over both servers whose slices start at no multiple
// of 16, a small key, and a step where one worker's second slice holds a NaN (the step is
// skipped on every server and rolled back). The kernel itself is also held to QuantizeSlices
// for fp32, fp16 and bf16 (packed words, residuals and flags), on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "compress/compress.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/packed_push.h"
#include "ops/device.h"
#include "tests/compress/compress_fixture.h"  // SameBits
#include "tests/local_job.h"
#include "tests/ops/cuda_compare.h"

#ifdef TALLY_HAVE_CUDA
#include "compress/cuda/quantize.h"
#endif

namespace tally {
namespace {

constexpr int64_t kBig = 100003;  // above the slicing bound: one slice per server
constexpr int64_t kSmall = 37;
constexpr int kSteps = 4;
constexpr int kNanStep = 2;  // worker 1's big gradient has a NaN in its second slice
constexpr float kLossScale = 8.0f;

enum class Path { kStore, kPackedOnHost, kGpu };

CompressionConfig Gc() {
  CompressionConfig gc;
  EXPECT_TRUE(ParseCompression("2bit", 0.5f, &gc).ok());
  gc.scale = 64.0f;
  return gc;
}

// Worker `rank`'s gradient of `step` for a key of n values, in fp16 (loss-scaled).
Tensor Grad(int rank, int step, int64_t n) {
  Tensor g = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    g.data<float>()[i] = static_cast<float>(((i * 7919 + rank * 104729 + step * 1299709) % 2001) - 1000) / 1250.0f;
  }
  if (n == kBig && rank == 1 && step == kNanStep) g.data<float>()[kBig - 5] = std::nanf("");
  return g.To(DType::kF16);
}

// A copy of t on dev (t itself when it is there already).
Tensor On(const Tensor& t, Device dev) {
  if (t.device() == dev) return t;
  Tensor x = Tensor::Empty(t.shape(), t.dtype(), dev);
  x.CopyFrom(t);  // to the host: waits for the stream
  return x;
}

std::unique_ptr<KVStore> MakeStore(Cluster* c, bool gpu) {
  KVStoreSpec spec;
  spec.type = KVStoreType::kDistSync;
  spec.cluster = c;
  if (gpu) spec.gpus = {testing::Gpu()};
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  return kv;
}

// One key's push on the host as a GPU worker makes it: QuantizeSlices, then PushPullPacked.
struct HostPacker {
  std::vector<PackedSlice> layout;
  Tensor residual, packed, nonfinite;

  Status Push(KVStore* kv, int key, const Tensor& grad, const Tensor& out) {
    auto* pp = dynamic_cast<PackedPushes*>(kv);
    if (pp == nullptr) return Status::InvalidArgument("no packed pushes");
    if (layout.empty()) {
      std::vector<Placement::Slice> slices;
      TALLY_RETURN_IF_ERROR(pp->KeySlices(key, &slices));
      layout = PackedLayout(CompressionType::kTwoBit, SliceSpans(slices));
      residual = Tensor::Zeros({grad.numel()}, DType::kF32);
      packed = Tensor::Zeros({layout.back().byte_offset + layout.back().bytes}, DType::kU8);
      nonfinite = Tensor::Zeros({static_cast<int64_t>(layout.size())}, DType::kI32);
    }
    QuantizeSlices(Gc(), grad, kLossScale, layout, &residual, &packed, &nonfinite);
    return pp->PushPullPacked(key, SplitPacked(layout, packed, nonfinite), grad, {out}, -key);
  }
};

// Every worker's weights after every step (fp32, host), and the steps reported skipped.
struct Result {
  std::vector<std::vector<Tensor>> weights[2];  // [rank][step][key]
  std::vector<int64_t> skipped[2];
};

void RunWorker(Path path, int rank, Cluster* cluster, Result* result) {
  auto kv = MakeStore(cluster, path == Path::kGpu);
  ASSERT_NE(kv, nullptr);
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 1.0f;
  sgd.momentum = 0.0f;
  sgd.wd = 0.0f;
  ASSERT_TRUE(kv->SetOptimizer(sgd).ok());
  ASSERT_TRUE(kv->SetGradientCompression(Gc()).ok());
  const std::vector<int64_t> sizes = {kBig, kSmall};
  ASSERT_TRUE(kv->Init({0, 1}, {Tensor::Zeros({kBig}, DType::kF32), Tensor::Zeros({kSmall}, DType::kF32)}).ok());
  ASSERT_TRUE(kv->trainer_hooks()->SetGradientScale(kLossScale).ok());
  const Device dev = path == Path::kGpu ? testing::Gpu() : Device::Cpu();
  HostPacker packers[2];
  std::vector<Tensor> grads(2), outs(2);
  for (int step = 0; step < kSteps; ++step) {
    for (int key = 0; key < 2; ++key) {
      grads[key] = On(Grad(rank, step, sizes[key]), dev);
      if (!outs[key].defined()) outs[key] = Tensor::Zeros({sizes[key]}, DType::kF32, dev);
      Status s = path == Path::kPackedOnHost ? packers[key].Push(kv.get(), key, grads[key], outs[key])
                                             : kv->PushPull(key, {grads[key]}, {outs[key]}, -key);
      ASSERT_TRUE(s.ok()) << s;
    }
    Status s = kv->WaitAll();
    ASSERT_TRUE(s.ok()) << s;
    SkippedStep skip;
    if (kv->trainer_hooks()->TakeSkippedStep(&skip)) result->skipped[rank].push_back(skip.step);
    std::vector<Tensor> host;
    for (const Tensor& o : outs) host.push_back(On(o, Device::Cpu()).Clone());  // after the upload
    result->weights[rank].push_back(host);
  }
}

Result RunJob(Path path) {
  Result result;
  LocalJob job(false, 2, 2);
  job.Run([&](int rank, Cluster* cluster) { RunWorker(path, rank, cluster, &result); });
  return result;
}

void ExpectSameBits(const Result& got, const Result& want) {
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got.skipped[r], want.skipped[r]) << "worker " << r;
    ASSERT_EQ(got.weights[r].size(), want.weights[r].size()) << "worker " << r;
    for (size_t step = 0; step < want.weights[r].size(); ++step) {
      for (size_t k = 0; k < want.weights[r][step].size(); ++k) {
        const Tensor& g = got.weights[r][step][k];
        const Tensor& w = want.weights[r][step][k];
        ASSERT_EQ(g.numel(), w.numel());
        EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), w.nbytes()), 0)
            << "worker " << r << " step " << step << " key " << k;
      }
    }
  }
}

TEST(PackedPush, LayoutPutsEachSliceAfterThePreviousInWholeWords) {
  const std::vector<PackedSlice> two = PackedLayout(CompressionType::kTwoBit, {{0, 50001}, {50001, 50002}, {100003, 1}});
  ASSERT_EQ(two.size(), 3u);
  EXPECT_EQ(two[0].byte_offset, 0);
  EXPECT_EQ(two[0].bytes, 4 * 3126);  // 50001 values: 3126 words of 16
  EXPECT_EQ(two[1].byte_offset, 4 * 3126);
  EXPECT_EQ(two[1].offset, 50001);
  EXPECT_EQ(two[1].length, 50002);
  EXPECT_EQ(two[2].byte_offset, 4 * 3126 * 2);
  EXPECT_EQ(two[2].bytes, 4);
  const std::vector<PackedSlice> one = PackedLayout(CompressionType::kOneBit, {{0, 33}, {33, 32}});
  EXPECT_EQ(one[0].bytes, 8);
  EXPECT_EQ(one[1].byte_offset, 8);
  EXPECT_EQ(one[1].bytes, 4);
  EXPECT_TRUE(PackedLayout(CompressionType::kTwoBit, {}).empty());
}

TEST(PackedPush, SplitLeavesOutTheSlicesThatAreNotFinite) {
  const std::vector<PackedSlice> layout = PackedLayout(CompressionType::kTwoBit, {{0, 20}, {20, 5}, {25, 40}});
  Tensor packed = Tensor::Zeros({24}, DType::kU8);  // 8 + 4 + 12 bytes
  Tensor nonfinite = Tensor::Zeros({3}, DType::kI32);
  nonfinite.data<int32_t>()[1] = 1;
  const std::vector<Tensor> parts = SplitPacked(layout, packed, nonfinite);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].numel(), 8);
  EXPECT_FALSE(parts[1].defined());
  EXPECT_EQ(parts[2].numel(), 12);  // a view of packed at byte 12
  EXPECT_EQ(static_cast<const uint8_t*>(parts[2].raw_data()) - static_cast<const uint8_t*>(packed.raw_data()), 12);
}

// QuantizeSlices is Quantize per slice: slice bits and residual as one Quantize of each slice
// gives, a non-finite slice flagged with its residual untouched, the others quantised.
TEST(PackedPush, QuantizeSlicesIsQuantizePerSlice) {
  const CompressionConfig gc = Gc();
  const std::vector<PackedSlice> layout = PackedLayout(gc.type, {{0, 21}, {21, 30}});
  Tensor grad = Grad(0, 1, 51).To(DType::kF32);
  grad.data<float>()[30] = std::numeric_limits<float>::infinity();
  Tensor residual = Tensor::Zeros({51}, DType::kF32), packed = Tensor::Zeros({12}, DType::kU8);
  Tensor nonfinite = Tensor::Zeros({2}, DType::kI32);
  residual.Fill(0.25f);
  QuantizeSlices(gc, grad, kLossScale, layout, &residual, &packed, &nonfinite);
  EXPECT_EQ(nonfinite.data<int32_t>()[0], 0);
  EXPECT_EQ(nonfinite.data<int32_t>()[1], 1);
  std::vector<float> r(21, 0.25f), in(21);
  for (int i = 0; i < 21; ++i) in[i] = grad.data<float>()[i] / kLossScale * gc.scale;
  std::vector<uint8_t> want(8);
  Quantize(gc, in.data(), r.data(), 21, want.data());
  EXPECT_EQ(std::memcmp(packed.raw_data(), want.data(), 8), 0);
  for (int i = 0; i < 21; ++i) EXPECT_TRUE(testing::SameBits(residual.data<float>()[i], r[i])) << i;
  for (int i = 21; i < 51; ++i) EXPECT_EQ(residual.data<float>()[i], 0.25f) << i;
}

TEST(PackedPush, RefusesBitsOfTheWrongSizeOrWithoutCompression) {
  const std::vector<Placement::Slice> slices = {{0, 0, 20}, {1, 20, 5}};
  std::map<int64_t, Tensor> out;
  const CompressionConfig gc = Gc();
  Status s = PackedByOffset(gc, 3, slices, {Tensor::Zeros({8}, DType::kU8)}, &out);
  EXPECT_FALSE(s.ok());
  s = PackedByOffset(gc, 3, slices, {Tensor::Zeros({8}, DType::kU8), Tensor::Zeros({8}, DType::kU8)}, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("slice 1"), std::string::npos) << s;
  s = PackedByOffset(CompressionConfig(), 3, slices, {Tensor(), Tensor()}, &out);
  EXPECT_FALSE(s.ok());
  s = PackedByOffset(gc, 3, slices, {Tensor::Zeros({8}, DType::kU8), Tensor()}, &out);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[20].defined());
}

// The GPU path's host half: bits made outside the store and pushed packed give the store's
// own compressed pushes' weights and skipped steps, bit for bit.
TEST(PackedPush, PackedPushesEqualTheStoresOwn) {
  const Result own = RunJob(Path::kStore);
  ASSERT_EQ(own.skipped[0], std::vector<int64_t>{kNanStep});
  const Result packed = RunJob(Path::kPackedOnHost);
  ExpectSameBits(packed, own);
}

// A GPU worker (GpuDistKVStore on cuda:0 for each of the two workers) gives the CPU
// store's weights and skipped steps, bit for bit.
TEST(PackedPushOnGpu, GpuWorkersEqualCpuWorkers) {
  TALLY_REQUIRE_GPU();
  const Result own = RunJob(Path::kStore);
  const Result gpu = RunJob(Path::kGpu);
  ExpectSameBits(gpu, own);
}

// QuantizeSlicesOnGpu against QuantizeSlices: packed words, residuals and flags, bit for
// bit, over three pushes, for fp32, fp16 and bf16 gradients, with and without the scales,
// one slice not finite at the second push.
TEST(PackedPushOnGpu, KernelEqualsQuantizeSlices) {
  TALLY_REQUIRE_GPU();
#ifdef TALLY_HAVE_CUDA
  const Device gpu = testing::Gpu();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (float loss_scale : {1.0f, kLossScale}) {
      CompressionConfig gc = Gc();
      if (loss_scale == 1.0f) gc.scale = 1.0f;
      const int64_t n = 70001;
      const std::vector<PackedSlice> layout = PackedLayout(gc.type, {{0, 33335}, {33335, 36666}});
      const int64_t bytes = layout.back().byte_offset + layout.back().bytes;
      Tensor rc = Tensor::Zeros({n}, DType::kF32), pc = Tensor::Zeros({bytes}, DType::kU8);
      Tensor fc = Tensor::Zeros({2}, DType::kI32);
      Tensor rg = Tensor::Zeros({n}, DType::kF32, gpu), pg = Tensor::Zeros({bytes}, DType::kU8, gpu);
      Tensor fg = Tensor::Zeros({2}, DType::kI32, gpu);
      for (int step = 0; step < 3; ++step) {
        Tensor g = Grad(0, step, n).To(DType::kF32);
        if (step == 1) g.data<float>()[40000] = -std::numeric_limits<float>::infinity();
        g = g.To(dtype);
        QuantizeSlices(gc, g, loss_scale, layout, &rc, &pc, &fc);
        QuantizeSlicesOnGpu(gc, On(g, gpu), loss_scale, layout, &rg, &pg, &fg);
        const Tensor r = On(rg, Device::Cpu()), p = On(pg, Device::Cpu()), f = On(fg, Device::Cpu());
        const std::string what = std::string(DTypeName(dtype)) + " loss scale " + std::to_string(loss_scale) +
                                 " step " + std::to_string(step);
        ASSERT_EQ(std::memcmp(f.raw_data(), fc.raw_data(), 8), 0) << what;
        ASSERT_EQ(std::memcmp(p.raw_data(), pc.raw_data(), bytes), 0) << what;
        ASSERT_EQ(std::memcmp(r.raw_data(), rc.raw_data(), n * 4), 0) << what;
      }
    }
  }
#endif
}

}  // namespace
}  // namespace tally
