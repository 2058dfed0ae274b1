// The cuDNN convolutions (ops/cuda/conv2d.cc) against the CPU reference (oneDNN) in fp32
// with TF32 off, fp16 and bf16: forward, backward-data and backward-filter on ResNet-50's
// kinds of convolution at small batch and on odd shapes, views at odd addresses, which
// engines run, and a repeated call that allocates nothing. Every test needs a GPU and says
// so when skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/backends.h"
#include "ops/cuda/conv2d.h"
#include "ops/device.h"
#include "tests/gradient_check.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using cuda::ConvPass;
using testing::ExpectClose;
using testing::Gpu;
using testing::RandomTensor;
using testing::Rounded;
using testing::ToDevice;
using testing::ToHostF32;

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const ConvPass kPasses[] = {ConvPass::kForward, ConvPass::kBackwardData,
                            ConvPass::kBackwardFilter};

struct Case {
  const char* name;
  Shape x, w;
  ConvParams p;
};

// ResNet-50's kinds of convolution, at small batch and spatial size so that the CPU
// reference stays quick.
const std::vector<Case>& ResNetCases() {
  static const std::vector<Case> cases = {
      {"stem 7x7 s2, C padded to 4", {2, 32, 32, 4}, {64, 7, 7, 4}, {2, 2, 3, 3}},
      {"stem 7x7 s2, C padded to 8", {2, 32, 32, 8}, {64, 7, 7, 8}, {2, 2, 3, 3}},
      {"1x1 reduce", {4, 14, 14, 256}, {64, 1, 1, 256}, {1, 1, 0, 0}},
      {"3x3", {4, 14, 14, 64}, {64, 3, 3, 64}, {1, 1, 1, 1}},
      {"3x3 s2", {4, 14, 14, 128}, {128, 3, 3, 128}, {2, 2, 1, 1}},
      {"1x1 s2 downsample", {4, 14, 14, 256}, {512, 1, 1, 256}, {2, 2, 0, 0}},
  };
  return cases;
}

const std::vector<Case>& OddCases() {
  static const std::vector<Case> cases = {
      {"stem with C=3", {2, 17, 19, 3}, {8, 7, 7, 3}, {2, 2, 3, 3}},
      {"3x3 on odd H, W and C", {3, 9, 11, 5}, {7, 3, 3, 5}, {1, 1, 1, 1}},
      {"non-square kernel, stride and pad", {2, 8, 7, 3}, {5, 3, 2, 3}, {2, 1, 1, 0}},
      {"1x1 s2 on odd H and W", {2, 7, 9, 6}, {4, 1, 1, 6}, {2, 2, 0, 0}},
  };
  return cases;
}

std::string Describe(const Case& c, DType dtype) {
  return std::string(c.name) + ": x " + ShapeString(c.x) + " w " + ShapeString(c.w) + " " +
         DTypeName(dtype);
}

// NaN everywhere: an element the GPU does not write, or an output it reads (beta is 0, so it
// must not), makes the comparison fail.
Tensor NanOnGpu(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, Gpu());
  t.Fill(std::nanf(""));
  return t;
}

bool AllFinite(const Tensor& host_f32) {
  for (int64_t i = 0; i < host_f32.numel(); ++i) {
    if (!std::isfinite(host_f32.data<float>()[i])) return false;
  }
  return true;
}

// The three passes on the GPU in `dtype` against the CPU on the same (rounded) values.
void ExpectPassesMatchCpu(const Case& c, DType dtype, uint64_t seed) {
  Rng rng(seed);
  const Shape ys = Conv2dOutputShape(c.x, c.w, c.p);
  const Tensor x = Rounded(RandomTensor(c.x, &rng), dtype);
  const Tensor w = Rounded(RandomTensor(c.w, &rng), dtype);
  const Tensor dy = Rounded(RandomTensor(ys, &rng), dtype);
  Tensor y = Tensor::Empty(ys, DType::kF32), dx = Tensor::Empty(c.x, DType::kF32);
  Tensor dw = Tensor::Empty(c.w, DType::kF32);
  cpu::Conv2dForward(x, w, c.p, &y);
  cpu::Conv2dBackwardData(dy, w, c.p, &dx);
  cpu::Conv2dBackwardFilter(x, dy, c.p, &dw);

  const Tensor xg = ToDevice(x, dtype), wg = ToDevice(w, dtype), dyg = ToDevice(dy, dtype);
  Tensor yg = NanOnGpu(ys, dtype), dxg = NanOnGpu(c.x, dtype), dwg = NanOnGpu(c.w, dtype);
  cuda::Conv2dForward(xg, wg, c.p, &yg);
  cuda::Conv2dBackwardData(dyg, wg, c.p, &dxg);
  cuda::Conv2dBackwardFilter(xg, dyg, c.p, &dwg);
  const std::string what = Describe(c, dtype);
  ExpectClose(what + " y", yg, y, dtype);
  ExpectClose(what + " dx", dxg, dx, dtype);
  ExpectClose(what + " dw", dwg, dw, dtype);
}

TEST(CudaConv2dTest, Fp32MatchesCpuOnResNetShapesWithoutTf32) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(false);
  uint64_t seed = 1;
  for (const Case& c : ResNetCases()) {
    ExpectPassesMatchCpu(c, DType::kF32, seed++);
    for (ConvPass pass : kPasses) {
      const std::string engine = cuda::Conv2dEngineName(pass, c.x, c.w, c.p, DType::kF32, Gpu());
      EXPECT_EQ(engine.find("tensor_core"), std::string::npos)
          << Describe(c, DType::kF32) << " pass " << static_cast<int>(pass) << ": " << engine;
    }
  }
}

TEST(CudaConv2dTest, Fp16MatchesCpuOnResNetShapes) {
  TALLY_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Case& c : ResNetCases()) ExpectPassesMatchCpu(c, DType::kF16, seed++);
}

TEST(CudaConv2dTest, Bf16MatchesCpuOnResNetShapes) {
  TALLY_REQUIRE_GPU();
  uint64_t seed = 200;
  for (const Case& c : ResNetCases()) ExpectPassesMatchCpu(c, DType::kBF16, seed++);
}

TEST(CudaConv2dTest, OddShapesMatchCpu) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(false);
  uint64_t seed = 300;
  for (DType dtype : kFloatTypes) {
    for (const Case& c : OddCases()) ExpectPassesMatchCpu(c, dtype, seed++);
  }
}

// A batch that starts one image into a larger tensor: with C=3 its address is only 2- or
// 4-byte aligned, which the plan must be built for.
TEST(CudaConv2dTest, ViewAtOddAddressMatchesCpu) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(false);
  const Case c = {"view", {2, 9, 7, 3}, {8, 3, 3, 3}, {1, 1, 1, 1}};
  Rng rng(400);
  for (DType dtype : kFloatTypes) {
    const Shape ys = Conv2dOutputShape(c.x, c.w, c.p);
    const Tensor big = Rounded(RandomTensor({3, 9, 7, 3}, &rng), dtype);
    const Tensor w = Rounded(RandomTensor(c.w, &rng), dtype);
    const Tensor dy = Rounded(RandomTensor(ys, &rng), dtype);
    const Tensor x = big.Slice(1, 3).Clone();
    Tensor y = Tensor::Empty(ys, DType::kF32), dw = Tensor::Empty(c.w, DType::kF32);
    cpu::Conv2dForward(x, w, c.p, &y);
    cpu::Conv2dBackwardFilter(x, dy, c.p, &dw);

    const Tensor big_g = ToDevice(big, dtype), wg = ToDevice(w, dtype), dyg = ToDevice(dy, dtype);
    const Tensor xg = big_g.Slice(1, 3);
    Tensor yg = NanOnGpu(ys, dtype), dwg = NanOnGpu(c.w, dtype);
    cuda::Conv2dForward(xg, wg, c.p, &yg);
    cuda::Conv2dBackwardFilter(xg, dyg, c.p, &dwg);
    ExpectClose(Describe(c, dtype) + " y", yg, y, dtype);
    ExpectClose(Describe(c, dtype) + " dw", dwg, dw, dtype);
    // dx written into the middle of a larger tensor, around which nothing may change.
    Tensor dx = Tensor::Empty(c.x, DType::kF32);
    cpu::Conv2dBackwardData(dy, w, c.p, &dx);
    Tensor dx_big = Tensor::Zeros({3, 9, 7, 3}, dtype, Gpu());
    Tensor dxg = dx_big.Slice(1, 3);
    cuda::Conv2dBackwardData(dyg, wg, c.p, &dxg);
    ExpectClose(Describe(c, dtype) + " dx", dxg, dx, dtype);
    const Tensor first = testing::ToHostF32(dx_big.Slice(0, 1));
    for (int64_t i = 0; i < first.numel(); ++i) {
      ASSERT_EQ(first.data<float>()[i], 0.0f) << Describe(c, dtype) << " wrote before dx at " << i;
    }
  }
}

// 16-bit convolutions whose channels are multiples of 8 (every ResNet-50 layer but the
// stem) are what tensor cores are for; an engine without them is several times slower.
TEST(CudaConv2dTest, Fp16ResNetShapesRunOnTensorCores) {
  TALLY_REQUIRE_GPU();
  for (const Case& c : ResNetCases()) {
    if (c.x[3] % 8 != 0 || c.w[0] % 8 != 0) continue;
    for (ConvPass pass : kPasses) {
      const std::string engine = cuda::Conv2dEngineName(pass, c.x, c.w, c.p, DType::kF16, Gpu());
      EXPECT_NE(engine.find("tensor_core"), std::string::npos)
          << Describe(c, DType::kF16) << " pass " << static_cast<int>(pass) << ": " << engine;
    }
  }
}

// With TF32 allowed, fp32 inputs are rounded to a 10-bit mantissa inside the engine: the
// result is as close as fp16's (inputs rounded the same way, outputs kept in fp32), far from
// the O(1) error of a wrong convolution.
TEST(CudaConv2dTest, Fp32WithTf32StaysClose) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(true);
  const Case& c = ResNetCases()[3];  // 3x3
  Rng rng(500);
  const Shape ys = Conv2dOutputShape(c.x, c.w, c.p);
  const Tensor x = RandomTensor(c.x, &rng), w = RandomTensor(c.w, &rng);
  Tensor y = Tensor::Empty(ys, DType::kF32);
  cpu::Conv2dForward(x, w, c.p, &y);
  Tensor yg = NanOnGpu(ys, DType::kF32);
  cuda::Conv2dForward(ToDevice(x, DType::kF32), ToDevice(w, DType::kF32), c.p, &yg);
  const double err = testing::RelativeError(yg, y);
  SetAllowTf32(false);
  EXPECT_LE(err, testing::ToleranceFor(DType::kF16)) << Describe(c, DType::kF32) << " with TF32";
}

// SetDeterministic(true): no engine marked nondeterministic is chosen, and two runs of the
// backward passes give the same bits.
TEST(CudaConv2dTest, DeterministicModeRepeatsBitForBit) {
  TALLY_REQUIRE_GPU();
  SetDeterministic(true);
  Rng rng(700);
  for (const Case& c : ResNetCases()) {
    const Shape ys = Conv2dOutputShape(c.x, c.w, c.p);
    const Tensor x = ToDevice(RandomTensor(c.x, &rng), DType::kF16);
    const Tensor dy = ToDevice(RandomTensor(ys, &rng), DType::kF16);
    const Tensor w = ToDevice(RandomTensor(c.w, &rng), DType::kF16);
    Tensor dw1 = NanOnGpu(c.w, DType::kF16), dw2 = NanOnGpu(c.w, DType::kF16);
    Tensor dx1 = NanOnGpu(c.x, DType::kF16), dx2 = NanOnGpu(c.x, DType::kF16);
    cuda::Conv2dBackwardFilter(x, dy, c.p, &dw1);
    cuda::Conv2dBackwardFilter(x, dy, c.p, &dw2);
    cuda::Conv2dBackwardData(dy, w, c.p, &dx1);
    cuda::Conv2dBackwardData(dy, w, c.p, &dx2);
    const Tensor a = ToHostF32(dw1), b = ToHostF32(dw2), e = ToHostF32(dx1), f = ToHostF32(dx2);
    // Outputs left at their NaN fill would compare equal too: they must have been written.
    EXPECT_TRUE(AllFinite(a) && AllFinite(e)) << Describe(c, DType::kF16);
    EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes())) << Describe(c, DType::kF16);
    EXPECT_EQ(0, std::memcmp(e.raw_data(), f.raw_data(), e.nbytes())) << Describe(c, DType::kF16);
    for (ConvPass pass : kPasses) {
      const std::string engine = cuda::Conv2dEngineName(pass, c.x, c.w, c.p, DType::kF16, Gpu());
      EXPECT_EQ(engine.find("nondeterministic"), std::string::npos) << Describe(c, DType::kF16) << ": " << engine;
    }
  }
  SetDeterministic(false);
}

// Plans are cached and the workspace comes back from the caching allocator: after the
// first call of each pass, the same calls make no cudaMalloc.
TEST(CudaConv2dTest, RepeatedCallsMakeNoCudaMalloc) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(false);
  const Case& c = ResNetCases()[4];  // 3x3 s2
  const Shape ys = Conv2dOutputShape(c.x, c.w, c.p);
  Rng rng(600);
  for (DType dtype : kFloatTypes) {
    const Tensor x = ToDevice(RandomTensor(c.x, &rng), dtype);
    const Tensor w = ToDevice(RandomTensor(c.w, &rng), dtype);
    const Tensor dy = ToDevice(RandomTensor(ys, &rng), dtype);
    Tensor y = Tensor::Empty(ys, dtype, Gpu()), dx = Tensor::Empty(c.x, dtype, Gpu());
    Tensor dw = Tensor::Empty(c.w, dtype, Gpu());
    auto step = [&] {
      cuda::Conv2dForward(x, w, c.p, &y);
      cuda::Conv2dBackwardData(dy, w, c.p, &dx);
      cuda::Conv2dBackwardFilter(x, dy, c.p, &dw);
      Synchronize(Gpu());
    };
    step();
    const int64_t mallocs = GetDeviceMemoryStats(0).device_mallocs;
    step();
    step();
    EXPECT_EQ(GetDeviceMemoryStats(0).device_mallocs, mallocs) << DTypeName(dtype);
  }
}

TEST(CudaConv2dDeathTest, MismatchesNameOpAndTensor) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  const Tensor x = Tensor::Zeros({1, 4, 4, 8}, DType::kF16, Gpu());
  const Tensor w16 = Tensor::Zeros({2, 3, 3, 8}, DType::kF16, Gpu());
  const Tensor w32 = Tensor::Zeros({2, 3, 3, 8}, DType::kF32, Gpu());
  Tensor y = Tensor::Zeros({1, 2, 2, 2}, DType::kF16, Gpu());
  EXPECT_DEATH(cuda::Conv2dForward(x, w32, {}, &y),
               "Conv2dForward: w float32\\[2,3,3,8\\]@cuda:0 is not float16");
  Tensor y_bad = Tensor::Zeros({1, 3, 2, 2}, DType::kF16, Gpu());
  EXPECT_DEATH(cuda::Conv2dForward(x, w16, {}, &y_bad),
               "Conv2dForward: y \\[1,3,2,2\\] for x \\[1,4,4,8\\] and w \\[2,3,3,8\\] should be "
               "\\[1,2,2,2\\]");
  const Tensor x_host = Tensor::Zeros({1, 4, 4, 8}, DType::kF16);
  Tensor dw = Tensor::Zeros({2, 3, 3, 8}, DType::kF16, Gpu());
  EXPECT_DEATH(cuda::Conv2dBackwardFilter(x_host, y, {}, &dw),
               "Conv2dBackwardFilter: x float16\\[1,4,4,8\\]@cpu:0 is not on a CUDA device");
}

}  // namespace
}  // namespace tally
