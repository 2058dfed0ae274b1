// The CUDA fully connected layer (ops/cuda/linear.cc, cuBLASLt) against the CPU reference,
// in fp32 (TF32 off), fp16 and bf16, on ResNet-50's classifier and on odd sizes, with the
// bias in the epilogue and without, and on slices whose pointers are barely aligned.
#include <gtest/gtest.h>

#include <string>

#include "ops/backends.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::ExpectClose;
using testing::Gpu;
using testing::RandomTensor;
using testing::Rounded;
using testing::ToDevice;

// Sets the TF32 switch for a test and restores it after.
class ScopedTf32 {
 public:
  explicit ScopedTf32(bool allow) : saved_(AllowTf32()) { SetAllowTf32(allow); }
  ~ScopedTf32() { SetAllowTf32(saved_); }

 private:
  bool saved_;
};

struct Shape3 {
  int64_t n, in, out;
};

std::string Name(DType t, const Shape3& s) {
  return std::string(DTypeName(t)) + " N=" + std::to_string(s.n) + " " + std::to_string(s.in) +
         "->" + std::to_string(s.out);
}

// The CPU's results on inputs rounded to t, and the GPU's from the same values in t.
void CompareWithCpu(DType t, const Shape3& s, uint64_t seed) {
  SCOPED_TRACE(Name(t, s));
  Rng rng(seed);
  const Tensor x = Rounded(RandomTensor({s.n, s.in}, &rng), t);
  const Tensor w = Rounded(RandomTensor({s.out, s.in}, &rng), t);
  const Tensor b = Rounded(RandomTensor({s.out}, &rng), t);
  const Tensor dy = Rounded(RandomTensor({s.n, s.out}, &rng), t);
  Tensor y = Tensor::Empty({s.n, s.out}, DType::kF32), y_nob = y.Clone();
  cpu::LinearForward(x, w, &b, &y);
  cpu::LinearForward(x, w, nullptr, &y_nob);
  Tensor dx = Tensor::Empty({s.n, s.in}, DType::kF32), dw = Tensor::Empty({s.out, s.in}, DType::kF32);
  Tensor db = Tensor::Empty({s.out}, DType::kF32);
  cpu::LinearBackward(x, w, dy, &dx, &dw, &db);

  const Tensor xg = ToDevice(x, t), wg = ToDevice(w, t), bg = ToDevice(b, t), dyg = ToDevice(dy, t);
  Tensor yg = Tensor::Empty({s.n, s.out}, t, Gpu());
  LinearForward(xg, wg, &bg, &yg);
  ExpectClose("y", yg, y, t);
  LinearForward(xg, wg, nullptr, &yg);
  ExpectClose("y without bias", yg, y_nob, t);

  Tensor dxg = Tensor::Empty({s.n, s.in}, t, Gpu()), dwg = Tensor::Empty({s.out, s.in}, t, Gpu());
  Tensor dbg = Tensor::Empty({s.out}, t, Gpu());
  LinearBackward(xg, wg, dyg, &dxg, &dwg, &dbg);
  ExpectClose("dx", dxg, dx, t);
  ExpectClose("dw", dwg, dw, t);
  ExpectClose("db", dbg, db, t);
  // dx and db are optional; dw comes out the same without them (another plan: no epilogue).
  Tensor dw_only = Tensor::Empty({s.out, s.in}, t, Gpu());
  LinearBackward(xg, wg, dyg, nullptr, &dw_only, nullptr);
  ExpectClose("dw alone", dw_only, dw, t);
}

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST(CudaLinearTest, ResNet50ClassifierMatchesCpu) {
  TALLY_REQUIRE_GPU();
  ScopedTf32 tf32(false);
  for (DType t : kDTypes) CompareWithCpu(t, {32, 2048, 1000}, 1);
}

TEST(CudaLinearTest, OddSizesMatchCpu) {
  TALLY_REQUIRE_GPU();
  ScopedTf32 tf32(false);
  const Shape3 shapes[] = {{7, 13, 5}, {3, 129, 65}, {1, 1, 1}, {33, 1000, 17}, {257, 3, 31}};
  uint64_t seed = 10;
  for (DType t : kDTypes) {
    for (const Shape3& s : shapes) CompareWithCpu(t, s, ++seed);
  }
}

// Row slices starting at row 1 of a 13-column matrix: fp16 pointers 26 bytes past an
// allocation, 2-byte aligned, which cuBLASLt's fastest kernels refuse; the plan must notice.
TEST(CudaLinearTest, MisalignedSlicesMatchCpu) {
  TALLY_REQUIRE_GPU();
  ScopedTf32 tf32(false);
  const int64_t n = 5, in = 13, out = 7;
  for (DType t : kDTypes) {
    SCOPED_TRACE(DTypeName(t));
    Rng rng(20);
    const Tensor x_all = Rounded(RandomTensor({n + 1, in}, &rng), t);
    const Tensor w = Rounded(RandomTensor({out, in}, &rng), t);
    const Tensor b = Rounded(RandomTensor({out}, &rng), t);
    const Tensor dy_all = Rounded(RandomTensor({n + 1, out}, &rng), t);
    const Tensor x = x_all.Slice(1, n + 1), dy = dy_all.Slice(1, n + 1);
    Tensor y = Tensor::Empty({n, out}, DType::kF32);
    cpu::LinearForward(x, w, &b, &y);
    Tensor dx = Tensor::Empty({n, in}, DType::kF32), dw = Tensor::Empty({out, in}, DType::kF32);
    Tensor db = Tensor::Empty({out}, DType::kF32);
    cpu::LinearBackward(x, w, dy, &dx, &dw, &db);

    const Tensor xg = ToDevice(x_all, t).Slice(1, n + 1), dyg = ToDevice(dy_all, t).Slice(1, n + 1);
    const Tensor wg = ToDevice(w, t), bg = ToDevice(b, t);
    Tensor yg = Tensor::Empty({n + 1, out}, t, Gpu()).Slice(1, n + 1);
    Tensor dxg = Tensor::Empty({n + 1, in}, t, Gpu()).Slice(1, n + 1);
    Tensor dwg = Tensor::Empty({out, in}, t, Gpu()), dbg = Tensor::Empty({out}, t, Gpu());
    LinearForward(xg, wg, &bg, &yg);
    LinearBackward(xg, wg, dyg, &dxg, &dwg, &dbg);
    ExpectClose("y", yg, y, t);
    ExpectClose("dx", dxg, dx, t);
    ExpectClose("dw", dwg, dw, t);
    ExpectClose("db", dbg, db, t);
  }
}

// With TF32 on, fp32 products round their inputs to a 10-bit mantissa, as fp16 does: held to
// fp16's tolerance.
TEST(CudaLinearTest, Tf32StaysNearFp32) {
  TALLY_REQUIRE_GPU();
  ScopedTf32 tf32(true);
  Rng rng(30);
  const Tensor x = RandomTensor({32, 2048}, &rng), w = RandomTensor({1000, 2048}, &rng);
  Tensor y = Tensor::Empty({32, 1000}, DType::kF32);
  cpu::LinearForward(x, w, nullptr, &y);
  Tensor yg = Tensor::Empty({32, 1000}, DType::kF32, Gpu());
  LinearForward(ToDevice(x, DType::kF32), ToDevice(w, DType::kF32), nullptr, &yg);
  EXPECT_LE(testing::RelativeError(yg, y), testing::ToleranceFor(DType::kF16));
}

TEST(CudaLinearTest, SecondCallAllocatesNothing) {
  TALLY_REQUIRE_GPU();
  for (DType t : kDTypes) {
    SCOPED_TRACE(DTypeName(t));
    Rng rng(40);
    const Tensor xg = ToDevice(RandomTensor({32, 2048}, &rng), t);
    const Tensor wg = ToDevice(RandomTensor({1000, 2048}, &rng), t);
    const Tensor bg = ToDevice(RandomTensor({1000}, &rng), t);
    Tensor yg = Tensor::Empty({32, 1000}, t, Gpu());
    Tensor dxg = Tensor::Empty({32, 2048}, t, Gpu()), dwg = Tensor::Empty({1000, 2048}, t, Gpu());
    Tensor dbg = Tensor::Empty({1000}, t, Gpu());
    auto step = [&] {
      LinearForward(xg, wg, &bg, &yg);
      LinearBackward(xg, wg, yg, &dxg, &dwg, &dbg);
    };
    step();
    Synchronize(Gpu());
    const int64_t mallocs = GetDeviceMemoryStats(0).device_mallocs;
    step();
    Synchronize(Gpu());
    EXPECT_EQ(GetDeviceMemoryStats(0).device_mallocs, mallocs);
  }
}

TEST(CudaLinearDeathTest, MixedDTypesNameOpAndTensor) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor x = Tensor::Zeros({2, 3}, DType::kF16, Gpu()), w = Tensor::Zeros({4, 3}, DType::kF32, Gpu());
  Tensor y = Tensor::Zeros({2, 4}, DType::kF16, Gpu());
  EXPECT_DEATH(LinearForward(x, w, nullptr, &y), "LinearForward: w .* should be float16 \\[4,3\\]");
}

}  // namespace
}  // namespace tally
