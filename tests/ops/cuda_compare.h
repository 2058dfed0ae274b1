// Helpers for the tests that hold each CUDA op to its CPU reference (tests/ops/cuda_*_test.cc).
//
//   TALLY_REQUIRE_GPU();                                   // a visible skip without a GPU
//   Tensor x = RandomTensor({8, 14, 14, 64}, &rng);         // host fp32
//   Tensor xg = ToDevice(x, DType::kF16);                   // what the GPU computes on
//   x = Rounded(x, DType::kF16);                            // the same values, for the CPU
//   ... cpu op on x, cuda op on xg ...
//   ExpectClose("conv y", yg, y, DType::kF16);             // relative error per tensor
//
// Tolerances (relative L2 error of the whole tensor, ||gpu - cpu|| / ||cpu||): fp32 1e-5 with
// TF32 off, fp16 2e-3, bf16 1e-2. The CPU reference always computes in fp32 on inputs
// rounded to the GPU's dtype, so the error measured is the GPU's own: its accumulation order
// and the rounding of its 16-bit outputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ops/device.h"
#include "base/tensor.h"
#include "tests/gradient_check.h"

namespace tally {
namespace testing {

// Skips the calling test, visibly, when no GPU can run it. ctest shows it as "Skipped" and
// the output says why.
#define TALLY_REQUIRE_GPU()                                                                \
  do {                                                                                     \
    if (::tally::CudaDeviceCount() == 0) {                                                 \
      GTEST_SKIP() << "skipped: no GPU present ("                                          \
                   << (::tally::BuiltWithCuda() ? "no CUDA device visible to this process" \
                                                : "this build has no CUDA")                \
                   << ")";                                                                 \
    }                                                                                      \
  } while (0)

// As TALLY_REQUIRE_GPU, for tests that need two GPUs.
#define TALLY_REQUIRE_TWO_GPUS()                                                            \
  do {                                                                                    \
    TALLY_REQUIRE_GPU();                                                                  \
    if (::tally::CudaDeviceCount() < 2) {                                                 \
      GTEST_SKIP() << "skipped: needs 2 GPUs, this machine has " << ::tally::CudaDeviceCount(); \
    }                                                                                     \
  } while (0)

inline Device Gpu() { return Device{Device::Kind::kCuda, 0}; }

inline double ToleranceFor(DType t) {
  switch (t) {
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1e-2;
    default: return 1e-5;
  }
}

// A copy of `host` on cuda:0 in `dtype`.
inline Tensor ToDevice(const Tensor& host, DType dtype) {
  Tensor t = Tensor::Empty(host.shape(), dtype, Gpu());
  t.CopyFrom(host);
  return t;
}

// A host fp32 copy of any tensor.
inline Tensor ToHostF32(const Tensor& t) {
  Tensor h = Tensor::Empty(t.shape(), DType::kF32);
  h.CopyFrom(t);
  return h;
}

// `host` (fp32) with every value rounded to `dtype` and back.
inline Tensor Rounded(const Tensor& host, DType dtype) { return ToHostF32(host.To(dtype)); }

inline double RelativeError(const Tensor& got, const Tensor& want) {
  Tensor g = ToHostF32(got), w = ToHostF32(want);
  EXPECT_EQ(g.shape(), w.shape());
  const float* gp = g.data<float>();
  const float* wp = w.data<float>();
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double d = static_cast<double>(gp[i]) - wp[i];
    diff += d * d;
    norm += static_cast<double>(wp[i]) * wp[i];
  }
  if (norm == 0.0) return std::sqrt(diff);
  return std::sqrt(diff / norm);
}

// EXPECTs got (any device, any dtype) within ToleranceFor(dtype) of the fp32 reference want.
inline void ExpectClose(const std::string& what, const Tensor& got, const Tensor& want,
                        DType dtype) {
  const double err = RelativeError(got, want);
  EXPECT_TRUE(std::isfinite(err) && err <= ToleranceFor(dtype))
      << what << " (" << DTypeName(dtype) << "): relative error " << err << " > "
      << ToleranceFor(dtype);
}

}  // namespace testing
}  // namespace tally
