// The CUDA ReLU and Add (ops/cuda/elementwise.cu) against the CPU ops in fp32, fp16 and bf16,
// on sizes with and without a vector tail, on views that are not 16-byte aligned (the scalar
// path), and in place. Through the public ops, so that it links without CUDA too.
#include <gtest/gtest.h>

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

// Odd sizes leave vector tails; {2, 56, 56, 64} is a ResNet activation.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {3, 5, 7, 9}, {2, 56, 56, 64}, {1}, {17}, {4, 3, 3, 17}};
  return shapes;
}

std::string Name(const char* what, const Shape& s, DType t) {
  return std::string(what) + " " + ShapeString(s) + " " + DTypeName(t);
}

Tensor GpuFilled(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, Gpu());
  t.Fill(7.0f);
  return t;
}

// Rows [1, n] of a device copy of [n + 1, ...]: with an odd row length the view starts off
// a 16-byte boundary.
Tensor Misaligned(const Tensor& host, DType dtype) {
  Shape big = host.shape();
  big[0] += 1;
  Tensor t = Tensor::Zeros(big, dtype, Gpu()).Slice(1, big[0]);
  t.CopyFrom(host);
  return t;
}

TEST(CudaElementwiseTest, ReluForwardMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(1);
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      Tensor x = Rounded(RandomTensor(shape, &rng), dt), y = Tensor::Empty(shape, DType::kF32);
      cpu::ReluForward(x, &y);
      Tensor xg = ToDevice(x, dt), y_g = GpuFilled(shape, dt);
      ReluForward(xg, &y_g);
      EXPECT_EQ(RelativeError(y_g, y), 0.0) << Name("y", shape, dt);  // exact in any dtype
      Tensor xm = Misaligned(x, dt), ym = Misaligned(x, dt);
      ReluForward(xm, &ym);
      EXPECT_EQ(RelativeError(ym, y), 0.0) << Name("misaligned y", shape, dt);
      ReluForward(xg, &xg);
      EXPECT_EQ(RelativeError(xg, y), 0.0) << Name("in place", shape, dt);
    }
  }
}

TEST(CudaElementwiseTest, ReluBackwardMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(2);
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      Tensor y = Rounded(RandomTensor(shape, &rng), dt);
      cpu::ReluForward(y, &y);  // an output of ReLU: zeros and positives
      Tensor dy = Rounded(RandomTensor(shape, &rng), dt), dx = Tensor::Empty(shape, DType::kF32);
      cpu::ReluBackward(y, dy, &dx);
      Tensor yg = ToDevice(y, dt), dyg = ToDevice(dy, dt), dx_g = GpuFilled(shape, dt);
      ReluBackward(yg, dyg, &dx_g);
      EXPECT_EQ(RelativeError(dx_g, dx), 0.0) << Name("dx", shape, dt);
      Tensor dxm = Misaligned(dy, dt);
      ReluBackward(Misaligned(y, dt), Misaligned(dy, dt), &dxm);
      EXPECT_EQ(RelativeError(dxm, dx), 0.0) << Name("misaligned dx", shape, dt);
      ReluBackward(yg, dyg, &dyg);  // dx may be dy
      EXPECT_EQ(RelativeError(dyg, dx), 0.0) << Name("dx in place", shape, dt);
    }
  }
}

TEST(CudaElementwiseTest, AddMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(3);
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      Tensor a = Rounded(RandomTensor(shape, &rng), dt), b = Rounded(RandomTensor(shape, &rng), dt);
      Tensor y = Tensor::Empty(shape, DType::kF32);
      cpu::Add(a, b, &y);
      Tensor ag = ToDevice(a, dt), bg = ToDevice(b, dt), y_g = GpuFilled(shape, dt);
      Add(ag, bg, &y_g);
      ExpectClose(Name("y", shape, dt), y_g, y, dt);
      Tensor ym = Misaligned(a, dt);
      Add(Misaligned(a, dt), Misaligned(b, dt), &ym);
      ExpectClose(Name("misaligned y", shape, dt), ym, y, dt);
      Add(ag, bg, &bg);  // y may be b
      ExpectClose(Name("y = b", shape, dt), bg, y, dt);
      Add(ag, ToDevice(b, dt), &ag);  // or a
      ExpectClose(Name("y = a", shape, dt), ag, y, dt);
    }
  }
}

TEST(CudaElementwiseDeathTest, DTypeMismatchNamesOp) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        Tensor a = Tensor::Zeros({2, 3}, DType::kF16, Gpu());
        Tensor b = Tensor::Zeros({2, 3}, DType::kF32, Gpu());
        Add(a, b, &a);
      },
      "Add: a float16\\[2,3\\].* and b float32\\[2,3\\]");
}

}  // namespace
}  // namespace tally
