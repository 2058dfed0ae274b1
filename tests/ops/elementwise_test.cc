// ReLU and Add against their definitions, including in-place use, and ReLU's gradient
// against finite differences.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::ExpectAllNear;
using testing::Filled;
using testing::RandomTensor;

TEST(ElementwiseTest, ReluForwardAndInPlace) {
  Rng rng(1);
  Tensor x = RandomTensor({3, 5, 7, 9}, &rng);  // odd sizes: vector tails
  std::vector<double> want(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) want[i] = std::max(0.0f, x.data<float>()[i]);
  Tensor y = Filled(x.shape(), 7.0f);
  ReluForward(x, &y);
  ExpectAllNear("y", y, want, 0, 0);
  ReluForward(x, &x);
  ExpectAllNear("in place", x, want, 0, 0);
}

TEST(ElementwiseTest, ReluBackwardFromOutput) {
  Rng rng(2);
  Tensor x = testing::DistinctTensor({2, 3, 4, 5}, &rng);
  Tensor y = Tensor::Empty(x.shape(), DType::kF32), r = RandomTensor(x.shape(), &rng);
  ReluForward(x, &y);
  Tensor dx = Filled(x.shape(), 7.0f);
  ReluBackward(y, r, &dx);
  std::vector<double> want(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    want[i] = x.data<float>()[i] > 0 ? r.data<float>()[i] : 0.0;
  }
  ExpectAllNear("dx", dx, want, 0, 0);
  // Finite differences are meaningless across the kink at 0; the smallest |x| of the ramp
  // is 1 / 120, so a step of 1e-3 never crosses it.
  auto loss = [&] {
    ReluForward(x, &y);
    return testing::Dot(y, r);
  };
  testing::ExpectGradientNear("dx", loss, &x, dx, 1e-3);
  ReluBackward(y, r, &r);  // dx may be dy
  ExpectAllNear("dx in place", r, want, 0, 0);
}

TEST(ElementwiseTest, AddAndAliasing) {
  Rng rng(3);
  Tensor a = RandomTensor({4, 3, 3, 17}, &rng), b = RandomTensor({4, 3, 3, 17}, &rng);
  std::vector<double> want(a.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    want[i] = static_cast<double>(a.data<float>()[i] + b.data<float>()[i]);
  }
  Tensor y = Filled(a.shape(), 7.0f);
  Add(a, b, &y);
  ExpectAllNear("y", y, want, 0, 0);
  Add(a, b, &b);
  ExpectAllNear("y = b", b, want, 0, 0);
}

TEST(ElementwiseDeathTest, ShapeMismatchNamesOp) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor a = Tensor::Zeros({2, 3}, DType::kF32), b = Tensor::Zeros({3, 2}, DType::kF32);
  EXPECT_DEATH(Add(a, b, &a), "Add: a float32\\[2,3\\].* and b float32\\[3,2\\]");
}

}  // namespace
}  // namespace tally
