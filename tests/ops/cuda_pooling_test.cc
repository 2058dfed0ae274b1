// The CUDA pooling ops (ops/cuda/pooling.cu) against the CPU ops in fp32, fp16 and bf16. Max
// pooling must agree exactly: the same maxima and the same argmax, ties included (16-bit
// rounding makes many); its fp32 gradient, gathered in the CPU op's order, bit for bit.
// Through the public ops, so that it links without CUDA too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/backends.h"
#include "ops/ops.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::ExpectClose;
using testing::Gpu;
using testing::RandomTensor;
using testing::RelativeError;
using testing::Rounded;
using testing::ToDevice;

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

struct Case {
  Shape x;
  PoolParams p;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{2, 112, 112, 64}, {3, 3, 2, 2, 1, 1}},  // ResNet's stem pool
      {{2, 9, 9, 3}, {3, 3, 2, 2, 1, 1}},       // odd size, 3 channels: the scalar path
      {{1, 8, 6, 5}, {2, 2, 2, 2, 0, 0}},
      {{2, 7, 5, 4}, {3, 2, 1, 2, 1, 0}},       // non-square kernel, stride and pad
      {{1, 5, 7, 17}, {3, 3, 1, 1, 2, 1}},      // overlapping windows, pad up to kernel - 1
      {{2, 10, 4, 8}, {5, 4, 1, 3, 4, 3}},      // windows much wider than the stride
      {{3, 6, 6, 12}, {1, 1, 3, 3, 0, 0}},      // inputs no window reaches
  };
  return cases;
}

std::string Name(const char* what, const Case& cs, DType t) {
  return std::string(what) + " " + ShapeString(cs.x) + " " + DTypeName(t);
}

Tensor GpuFilled(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, Gpu());
  t.Fill(7.0f);
  return t;
}

Tensor HostInt(const Tensor& t) {
  Tensor h = Tensor::Empty(t.shape(), DType::kI32);
  h.CopyFrom(t);
  return h;
}

void ExpectSameArgmax(const std::string& what, const Tensor& gpu, const Tensor& cpu) {
  Tensor g = HostInt(gpu);
  ASSERT_EQ(g.shape(), cpu.shape()) << what;
  int misses = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (g.data<int32_t>()[i] != cpu.data<int32_t>()[i] && ++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g.data<int32_t>()[i] << ", expected "
                    << cpu.data<int32_t>()[i];
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << g.numel() << " differ";
}

TEST(CudaPoolingTest, MaxPoolMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(1);
  for (DType dt : kDTypes) {
    for (const Case& cs : Cases()) {
      for (bool ties : {false, true}) {
        Tensor x = RandomTensor(cs.x, &rng);
        if (ties) {  // a few levels: most windows hold equal maxima
          float* p = x.data<float>();
          for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::round(4 * p[i]);
        }
        x = Rounded(x, dt);
        const Shape ys = PoolOutputShape(cs.x, cs.p);
        Tensor y = Tensor::Empty(ys, DType::kF32), argmax = Tensor::Empty(ys, DType::kI32);
        cpu::MaxPoolForward(x, cs.p, &y, &argmax);
        Tensor y_g = GpuFilled(ys, dt), argmax_g = Tensor::Zeros(ys, DType::kI32, Gpu());
        MaxPoolForward(ToDevice(x, dt), cs.p, &y_g, &argmax_g);
        const std::string tag = ties ? " ties" : "";
        EXPECT_EQ(RelativeError(y_g, y), 0.0) << Name("y", cs, dt) << tag;
        ExpectSameArgmax(Name("argmax", cs, dt) + tag, argmax_g, argmax);

        Tensor dy = Rounded(RandomTensor(ys, &rng), dt), dx = Tensor::Empty(cs.x, DType::kF32);
        cpu::MaxPoolBackward(dy, argmax, &dx);
        Tensor dx_g = GpuFilled(cs.x, dt);
        MaxPoolBackward(ToDevice(dy, dt), argmax_g, &dx_g);
        if (dt == DType::kF32) {
          EXPECT_EQ(RelativeError(dx_g, dx), 0.0) << Name("dx", cs, dt) << tag;
        } else {
          ExpectClose(Name("dx", cs, dt) + tag, dx_g, dx, dt);
        }
      }
    }
  }
}

// Padding never wins, even over the smallest value: all -1 with padding gives the first
// in-bounds element of each window.
TEST(CudaPoolingTest, MaxPoolPaddingNeverWins) {
  TALLY_REQUIRE_GPU();
  const Case cs{{1, 4, 4, 8}, {3, 3, 2, 2, 1, 1}};
  const Shape ys = PoolOutputShape(cs.x, cs.p);
  Tensor x = testing::Filled(cs.x, -1.0f), y = Tensor::Empty(ys, DType::kF32);
  Tensor argmax = Tensor::Empty(ys, DType::kI32);
  cpu::MaxPoolForward(x, cs.p, &y, &argmax);
  for (DType dt : kDTypes) {
    Tensor y_g = GpuFilled(ys, dt), argmax_g = Tensor::Zeros(ys, DType::kI32, Gpu());
    MaxPoolForward(ToDevice(x, dt), cs.p, &y_g, &argmax_g);
    EXPECT_EQ(RelativeError(y_g, y), 0.0) << Name("y", cs, dt);
    ExpectSameArgmax(Name("argmax", cs, dt), argmax_g, argmax);
  }
  EXPECT_EQ(argmax.data<int32_t>()[0], 0);  // window rows -1..1, columns -1..1
}

TEST(CudaPoolingTest, AvgPoolMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(2);
  for (DType dt : kDTypes) {
    for (const Case& cs : Cases()) {
      const Shape ys = PoolOutputShape(cs.x, cs.p);
      Tensor x = Rounded(RandomTensor(cs.x, &rng), dt), y = Tensor::Empty(ys, DType::kF32);
      cpu::AvgPoolForward(x, cs.p, &y);
      Tensor y_g = GpuFilled(ys, dt);
      AvgPoolForward(ToDevice(x, dt), cs.p, &y_g);
      ExpectClose(Name("y", cs, dt), y_g, y, dt);

      Tensor dy = Rounded(RandomTensor(ys, &rng), dt), dx = Tensor::Empty(cs.x, DType::kF32);
      cpu::AvgPoolBackward(dy, cs.p, &dx);
      Tensor dx_g = GpuFilled(cs.x, dt);
      AvgPoolBackward(ToDevice(dy, dt), cs.p, &dx_g);
      ExpectClose(Name("dx", cs, dt), dx_g, dx, dt);
    }
  }
}

TEST(CudaPoolingTest, GlobalAvgPoolMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(3);
  for (DType dt : kDTypes) {
    // ResNet-50's last pool at small batch, a wide plane, odd channels.
    for (const Shape& xs : {Shape{4, 7, 7, 2048}, Shape{2, 56, 56, 64}, Shape{3, 5, 7, 11}}) {
      const Shape ys{xs[0], xs[3]};
      const std::string name = ShapeString(xs) + " " + DTypeName(dt);
      Tensor x = Rounded(RandomTensor(xs, &rng), dt), y = Tensor::Empty(ys, DType::kF32);
      cpu::GlobalAvgPoolForward(x, &y);
      Tensor y_g = GpuFilled(ys, dt);
      GlobalAvgPoolForward(ToDevice(x, dt), &y_g);
      ExpectClose("y " + name, y_g, y, dt);

      Tensor dy = Rounded(RandomTensor(ys, &rng), dt), dx = Tensor::Empty(xs, DType::kF32);
      cpu::GlobalAvgPoolBackward(dy, &dx);
      Tensor dx_g = GpuFilled(xs, dt);
      GlobalAvgPoolBackward(ToDevice(dy, dt), &dx_g);
      ExpectClose("dx " + name, dx_g, dx, dt);
    }
  }
}

// Gathers, not atomics: two runs give the same bits.
TEST(CudaPoolingTest, BackwardIsDeterministic) {
  TALLY_REQUIRE_GPU();
  Rng rng(4);
  const Case& cs = Cases()[0];
  const Shape ys = PoolOutputShape(cs.x, cs.p);
  const DType dt = DType::kBF16;
  Tensor x = ToDevice(RandomTensor(cs.x, &rng), dt), dy = ToDevice(RandomTensor(ys, &rng), dt);
  Tensor y = GpuFilled(ys, dt), argmax = Tensor::Zeros(ys, DType::kI32, Gpu());
  MaxPoolForward(x, cs.p, &y, &argmax);
  Tensor first = GpuFilled(cs.x, dt), second = GpuFilled(cs.x, dt);
  MaxPoolBackward(dy, argmax, &first);
  MaxPoolBackward(dy, argmax, &second);
  const Tensor a = testing::ToHostF32(first), b = testing::ToHostF32(second);
  EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()));
}

TEST(CudaPoolingDeathTest, BadOutputShapeNamesOp) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        Tensor x = Tensor::Zeros({1, 4, 4, 2}, DType::kF16, Gpu());
        Tensor y = Tensor::Zeros({1, 3, 3, 2}, DType::kF16, Gpu());
        AvgPoolForward(x, {2, 2, 2, 2, 0, 0}, &y);
      },
      "AvgPoolForward: y \\[1,3,3,2\\] for x \\[1,4,4,2\\] should be \\[1,2,2,2\\]");
}

}  // namespace
}  // namespace tally
