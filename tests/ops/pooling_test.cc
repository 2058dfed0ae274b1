// Pooling against naive references; gradients against finite differences (max pooling on
// distinct values, so that no perturbation changes which element wins).
#include <gtest/gtest.h>

#include <limits>

#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::Dot;
using testing::ExpectAllNear;
using testing::ExpectGradientNear;
using testing::Filled;
using testing::RandomTensor;

struct Case {
  Shape x;
  PoolParams p;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{2, 9, 9, 3}, {3, 3, 2, 2, 1, 1}},  // ResNet's stem pool, odd size
      {{1, 8, 6, 5}, {2, 2, 2, 2, 0, 0}},
      {{2, 7, 5, 4}, {3, 2, 1, 2, 1, 0}},  // non-square kernel, stride and pad
      {{1, 5, 7, 17}, {3, 3, 1, 1, 2, 1}},  // overlapping windows, pad up to kernel - 1
  };
  return cases;
}

// Window values of x for output (n, i, j, c) in scan order, with their flat h * W + w.
template <typename Fn>
void ForWindow(const Tensor& x, const PoolParams& p, int64_t n, int64_t i, int64_t j, int64_t c,
               Fn fn) {
  const int64_t H = x.dim(1), W = x.dim(2), C = x.dim(3);
  for (int64_t r = 0; r < p.kernel_h; ++r)
    for (int64_t s = 0; s < p.kernel_w; ++s) {
      const int64_t h = i * p.stride_h - p.pad_h + r, w = j * p.stride_w - p.pad_w + s;
      if (h >= 0 && h < H && w >= 0 && w < W) fn(x.data<float>()[((n * H + h) * W + w) * C + c], h * W + w);
    }
}

TEST(PoolingTest, MaxForwardMatchesNaive) {
  Rng rng(1);
  for (const Case& cs : Cases()) {
    Tensor x = RandomTensor(cs.x, &rng);
    const Shape ys = PoolOutputShape(cs.x, cs.p);
    Tensor y = Filled(ys, 7.0f), argmax = Tensor::Empty(ys, DType::kI32);
    MaxPoolForward(x, cs.p, &y, &argmax);
    std::vector<double> want(NumElements(ys)), want_arg(NumElements(ys));
    int64_t o = 0;
    for (int64_t n = 0; n < ys[0]; ++n)
      for (int64_t i = 0; i < ys[1]; ++i)
        for (int64_t j = 0; j < ys[2]; ++j)
          for (int64_t c = 0; c < ys[3]; ++c, ++o) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t arg = -1;
            ForWindow(x, cs.p, n, i, j, c, [&](float v, int64_t flat) {
              if (v > best) best = v, arg = flat;
            });
            want[o] = best;
            want_arg[o] = static_cast<double>(arg);
          }
    ExpectAllNear("y " + ShapeString(cs.x), y, want, 0, 0);
    for (int64_t k = 0; k < argmax.numel(); ++k) {
      ASSERT_EQ(argmax.data<int32_t>()[k], want_arg[k]) << ShapeString(cs.x) << " at " << k;
    }
  }
}

TEST(PoolingTest, MaxTiesGoToTheFirstElement) {
  Tensor x = Filled({1, 2, 2, 1}, 1.0f);
  Tensor y = Tensor::Empty({1, 1, 1, 1}, DType::kF32), argmax = Tensor::Empty({1, 1, 1, 1}, DType::kI32);
  MaxPoolForward(x, {2, 2, 2, 2, 0, 0}, &y, &argmax);
  EXPECT_EQ(argmax.data<int32_t>()[0], 0);
  EXPECT_EQ(y.data<float>()[0], 1.0f);
}

TEST(PoolingTest, AvgForwardExcludesPadding) {
  Rng rng(2);
  for (const Case& cs : Cases()) {
    Tensor x = RandomTensor(cs.x, &rng);
    const Shape ys = PoolOutputShape(cs.x, cs.p);
    Tensor y = Filled(ys, 7.0f);
    AvgPoolForward(x, cs.p, &y);
    std::vector<double> want(NumElements(ys));
    int64_t o = 0;
    for (int64_t n = 0; n < ys[0]; ++n)
      for (int64_t i = 0; i < ys[1]; ++i)
        for (int64_t j = 0; j < ys[2]; ++j)
          for (int64_t c = 0; c < ys[3]; ++c, ++o) {
            double sum = 0.0;
            int count = 0;
            ForWindow(x, cs.p, n, i, j, c, [&](float v, int64_t) { sum += v, ++count; });
            want[o] = sum / count;
          }
    ExpectAllNear("y " + ShapeString(cs.x), y, want, 1e-6, 1e-6);
  }
}

TEST(PoolingTest, BackwardMatchesFiniteDifferences) {
  Rng rng(3);
  for (const Case& cs : Cases()) {
    const std::string name = ShapeString(cs.x);
    const Shape ys = PoolOutputShape(cs.x, cs.p);
    Tensor r = RandomTensor(ys, &rng), y = Tensor::Empty(ys, DType::kF32);
    Tensor argmax = Tensor::Empty(ys, DType::kI32);
    // Neighbours differ by 2 / numel >= 2e-3 after the shuffle, and a step of 1e-4 cannot
    // reorder them.
    Tensor x = testing::DistinctTensor(cs.x, &rng);
    auto max_loss = [&] {
      MaxPoolForward(x, cs.p, &y, &argmax);
      return Dot(y, r);
    };
    max_loss();
    Tensor dx = Filled(cs.x, 7.0f);
    MaxPoolBackward(r, argmax, &dx);
    ExpectGradientNear("max dx " + name, max_loss, &x, dx, 1e-4);

    auto avg_loss = [&] {
      AvgPoolForward(x, cs.p, &y);
      return Dot(y, r);
    };
    Tensor avg_dx = Filled(cs.x, 7.0f);
    AvgPoolBackward(r, cs.p, &avg_dx);
    ExpectGradientNear("avg dx " + name, avg_loss, &x, avg_dx);
  }
}

TEST(PoolingTest, GlobalAverage) {
  Rng rng(4);
  const Shape xs{3, 5, 7, 11};
  Tensor x = RandomTensor(xs, &rng), y = Filled({3, 11}, 7.0f);
  GlobalAvgPoolForward(x, &y);
  std::vector<double> want(33, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    want[(i / (5 * 7 * 11)) * 11 + i % 11] += x.data<float>()[i] / 35.0;
  }
  ExpectAllNear("y", y, want, 1e-6, 1e-6);
  Tensor r = RandomTensor({3, 11}, &rng), dx = Filled(xs, 7.0f);
  GlobalAvgPoolBackward(r, &dx);
  auto loss = [&] {
    GlobalAvgPoolForward(x, &y);
    return Dot(y, r);
  };
  ExpectGradientNear("dx", loss, &x, dx);
}

TEST(PoolingDeathTest, BadOutputShapeNamesOp) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor x = Tensor::Zeros({1, 4, 4, 2}, DType::kF32), y = Tensor::Zeros({1, 3, 3, 2}, DType::kF32);
  EXPECT_DEATH(AvgPoolForward(x, {2, 2, 2, 2, 0, 0}, &y),
               "AvgPoolForward: y \\[1,3,3,2\\] for x \\[1,4,4,2\\] should be \\[1,2,2,2\\]");
}

}  // namespace
}  // namespace tally
