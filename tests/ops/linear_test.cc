// Fully connected layer against a double reference and finite differences.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::Dot;
using testing::ExpectAllNear;
using testing::ExpectGradientNear;
using testing::Filled;
using testing::RandomTensor;

TEST(LinearTest, ForwardMatchesNaive) {
  Rng rng(1);
  const int64_t n = 5, in = 13, out = 7;
  Tensor x = RandomTensor({n, in}, &rng), w = RandomTensor({out, in}, &rng);
  Tensor b = RandomTensor({out}, &rng);
  std::vector<double> want(n * out), want_nob(n * out);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (int64_t k = 0; k < in; ++k) {
        acc += static_cast<double>(x.data<float>()[i * in + k]) * w.data<float>()[o * in + k];
      }
      want_nob[i * out + o] = acc;
      want[i * out + o] = acc + b.data<float>()[o];
    }
  Tensor y = Filled({n, out}, 7.0f);
  LinearForward(x, w, &b, &y);
  ExpectAllNear("y", y, want, 1e-5, 1e-5);
  LinearForward(x, w, nullptr, &y);
  ExpectAllNear("y without bias", y, want_nob, 1e-5, 1e-5);
}

TEST(LinearTest, BackwardMatchesFiniteDifferences) {
  Rng rng(2);
  const int64_t n = 4, in = 9, out = 6;
  Tensor x = RandomTensor({n, in}, &rng), w = RandomTensor({out, in}, &rng);
  Tensor b = RandomTensor({out}, &rng), r = RandomTensor({n, out}, &rng);
  Tensor y = Tensor::Empty({n, out}, DType::kF32);
  auto loss = [&] {
    LinearForward(x, w, &b, &y);
    return Dot(y, r);
  };
  Tensor dx = Filled({n, in}, 7.0f), dw = Filled({out, in}, 7.0f), db = Filled({out}, 7.0f);
  LinearBackward(x, w, r, &dx, &dw, &db);
  ExpectGradientNear("dx", loss, &x, dx);
  ExpectGradientNear("dw", loss, &w, dw);
  ExpectGradientNear("db", loss, &b, db);
  // dx and db are optional; dw comes out the same without them.
  Tensor dw_only = Filled({out, in}, 7.0f);
  LinearBackward(x, w, r, nullptr, &dw_only, nullptr);
  ExpectAllNear("dw alone", dw_only, testing::ToDouble(dw), 0, 0);
}

TEST(LinearDeathTest, MismatchNamesOpAndShapes) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor x = Tensor::Zeros({2, 3}, DType::kF32), w = Tensor::Zeros({4, 5}, DType::kF32);
  Tensor y = Tensor::Zeros({2, 4}, DType::kF32);
  EXPECT_DEATH(LinearForward(x, w, nullptr, &y),
               "LinearForward: x \\[2,3\\] and w \\[4,5\\] disagree on inputs");
}

}  // namespace
}  // namespace tally
