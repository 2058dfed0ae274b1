// Test helpers shared by the op tests: random tensors, double-precision comparison, and a
// central finite-difference gradient checker.
//
//   Tensor x = RandomTensor({2, 5, 5, 3}, &rng);
//   Tensor r = RandomTensor(y_shape, &rng);          // L = sum(y * r), so dL/dy = r
//   auto loss = [&] { Forward(x, &y); return Dot(y, r); };
//   ... backward with dy = r into dx ...
//   ExpectGradientNear("conv dx", loss, &x, dx);
//
// Tolerance of the checker: the forward runs in fp32, so L carries a rounding error of
// about 1e-7 * sum|y * r|, and the central difference divides it by 2 * eps; with
// eps = 1e-2 and the small shapes of these tests that is ~1e-4 of the gradient's scale,
// and the O(eps^2) truncation error of smooth ops is of the same order. An element passes
// when |fd - analytic| <= tol * (|analytic| + max|analytic|) with tol = 1e-2: 100x above
// the noise, while a wrong gradient (a dropped term, a transposed index) is off by O(1).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/random.h"
#include "base/tensor.h"

namespace tally {
namespace testing {

// Uniform in [lo, hi).
inline Tensor RandomTensor(const Shape& shape, Rng* rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * rng->Uniform();
  return t;
}

// A tensor of `value`: outputs start as garbage so that a test notices unwritten elements.
inline Tensor Filled(const Shape& shape, float value) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  t.Fill(value);
  return t;
}

// Distinct values, none zero (a shuffled ramp of midpoints in (-1, 1), spaced 2 / numel),
// for ops where ties or kinks change the result under finite differences (max pooling, ReLU).
inline Tensor DistinctTensor(const Shape& shape, Rng* rng) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  const int64_t n = t.numel();
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng->Below(static_cast<uint32_t>(i + 1))]);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = -1.0f + (2.0f * static_cast<float>(order[i]) + 1.0f) / static_cast<float>(n);
  return t;
}

inline std::vector<double> ToDouble(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<double>(p, p + t.numel());
}

// sum(y * r) in double.
inline double Dot(const Tensor& y, const Tensor& r) {
  EXPECT_EQ(y.numel(), r.numel());
  const float* a = y.data<float>();
  const float* b = r.data<float>();
  double s = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Every element of `actual` within atol + rtol * |expected| of `expected`; reports the
// first few misses.
inline void ExpectAllNear(const std::string& what, const Tensor& actual,
                          const std::vector<double>& expected, double atol, double rtol) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  const float* a = actual.data<float>();
  int misses = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double err = std::abs(a[i] - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i])) && ++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << a[i] << ", expected " << expected[i];
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << expected.size() << " differ";
}

// Compares `analytic` (dL/dinput) with central differences of loss() over `input`, which is
// perturbed in place and restored. With more than max_points elements, a fixed pseudo-random
// subset of max_points is checked.
template <typename Loss>
void ExpectGradientNear(const std::string& what, Loss loss, Tensor* input, const Tensor& analytic,
                        double eps = 1e-2, double tol = 1e-2, int max_points = 400) {
  ASSERT_EQ(input->numel(), analytic.numel()) << what;
  const int64_t n = input->numel();
  float* x = input->data<float>();
  const float* g = analytic.data<float>();
  double scale = 0.0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(static_cast<double>(g[i])));
  ASSERT_GT(scale, 0.0) << what << ": the analytic gradient is all zero, nothing is tested";
  Rng pick(12345);
  const bool all = n <= max_points;
  int misses = 0;
  for (int64_t k = 0; k < (all ? n : max_points); ++k) {
    const int64_t i = all ? k : static_cast<int64_t>(pick.Below(static_cast<uint32_t>(n)));
    const float saved = x[i];
    const float up = saved + static_cast<float>(eps), down = saved - static_cast<float>(eps);
    x[i] = up;
    const double plus = loss();
    x[i] = down;
    const double minus = loss();
    x[i] = saved;
    const double fd = (plus - minus) / (static_cast<double>(up) - down);  // the step taken
    if (!(std::abs(fd - g[i]) <= tol * (std::abs(g[i]) + scale)) && ++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << g[i] << ", finite difference " << fd;
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

}  // namespace testing
}  // namespace tally
