// Batch norm against double-precision references, and its backward passes against finite
// differences of L = sum(y * r).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::Dot;
using testing::ExpectAllNear;
using testing::ExpectGradientNear;
using testing::Filled;
using testing::RandomTensor;

struct Stats {
  std::vector<double> mean, var;  // biased variance
};

Stats NaiveStats(const Tensor& x) {
  const int64_t C = x.dim(-1), M = x.numel() / C;
  const float* p = x.data<float>();
  Stats s{std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) s.mean[c] += p[r * C + c];
  for (int64_t c = 0; c < C; ++c) s.mean[c] /= M;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) s.var[c] += std::pow(p[r * C + c] - s.mean[c], 2);
  for (int64_t c = 0; c < C; ++c) s.var[c] /= M;
  return s;
}

std::vector<double> NaiveNormalize(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const std::vector<double>& mean, const std::vector<double>& var,
                                   double eps) {
  const int64_t C = x.dim(-1);
  std::vector<double> y(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i % C;
    y[i] = (x.data<float>()[i] - mean[c]) / std::sqrt(var[c] + eps) * gamma.data<float>()[c] +
           beta.data<float>()[c];
  }
  return y;
}

TEST(BatchNormTest, ForwardTrainingMatchesNaive) {
  Rng rng(1);
  BatchNormParams p;
  p.eps = 1e-3f;
  p.momentum = 0.8f;
  for (const Shape& shape : {Shape{2, 5, 3, 7}, Shape{3, 1, 1, 16}, Shape{6, 13}}) {
    const int64_t C = shape.back(), M = NumElements(shape) / C;
    // An offset mean (3) exercises the shifted sums.
    Tensor x = RandomTensor(shape, &rng, 2.0f, 4.0f);
    Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f), beta = RandomTensor({C}, &rng);
    Tensor rm = RandomTensor({C}, &rng), rv = RandomTensor({C}, &rng, 0.5f, 1.5f);
    const std::vector<double> rm0 = testing::ToDouble(rm), rv0 = testing::ToDouble(rv);
    Tensor y = Filled(shape, 7.0f), mean = Filled({C}, 7.0f), inv_std = Filled({C}, 7.0f);
    BatchNormForwardTraining(x, gamma, beta, p, &rm, &rv, &y, &mean, &inv_std);

    const Stats s = NaiveStats(x);
    std::vector<double> want_is(C), want_rm(C), want_rv(C);
    for (int64_t c = 0; c < C; ++c) {
      want_is[c] = 1.0 / std::sqrt(s.var[c] + p.eps);
      want_rm[c] = 0.8 * rm0[c] + 0.2 * s.mean[c];
      want_rv[c] = 0.8 * rv0[c] + 0.2 * s.var[c] * M / (M - 1);  // unbiased
    }
    const std::string name = ShapeString(shape);
    ExpectAllNear("y " + name, y, NaiveNormalize(x, gamma, beta, s.mean, s.var, p.eps), 1e-5, 1e-5);
    ExpectAllNear("save_mean " + name, mean, s.mean, 0, 1e-6);
    ExpectAllNear("save_inv_std " + name, inv_std, want_is, 0, 1e-5);
    ExpectAllNear("running_mean " + name, rm, want_rm, 1e-6, 1e-6);
    ExpectAllNear("running_var " + name, rv, want_rv, 1e-6, 1e-6);
  }
}

// A large mean and a small spread: float sums of x and x^2 would lose the variance.
TEST(BatchNormTest, VarianceSurvivesLargeMean) {
  Rng rng(2);
  const Shape shape{8, 32, 32, 4};
  Tensor x = RandomTensor(shape, &rng, 1000.0f, 1000.01f);
  Tensor gamma = Filled({4}, 1.0f), beta = Filled({4}, 0.0f);
  Tensor rm = Filled({4}, 0.0f), rv = Filled({4}, 1.0f);
  Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({4}, DType::kF32);
  Tensor inv_std = Tensor::Empty({4}, DType::kF32);
  BatchNormParams p;
  p.eps = 0.0f;
  BatchNormForwardTraining(x, gamma, beta, p, &rm, &rv, &y, &mean, &inv_std);
  const Stats s = NaiveStats(x);
  std::vector<double> want_is(4);
  for (int c = 0; c < 4; ++c) want_is[c] = 1.0 / std::sqrt(s.var[c]);
  ExpectAllNear("inv_std", inv_std, want_is, 0, 1e-4);
}

TEST(BatchNormTest, ForwardInferenceMatchesNaive) {
  Rng rng(3);
  const Shape shape{2, 3, 5, 6};
  BatchNormParams p;
  Tensor x = RandomTensor(shape, &rng), gamma = RandomTensor({6}, &rng), beta = RandomTensor({6}, &rng);
  Tensor rm = RandomTensor({6}, &rng), rv = RandomTensor({6}, &rng, 0.1f, 2.0f);
  Tensor y = Filled(shape, 7.0f);
  BatchNormForwardInference(x, gamma, beta, rm, rv, p, &y);
  ExpectAllNear("y", y,
                NaiveNormalize(x, gamma, beta, testing::ToDouble(rm), testing::ToDouble(rv), p.eps),
                1e-5, 1e-5);
}

TEST(BatchNormTest, BackwardMatchesFiniteDifferences) {
  Rng rng(4);
  for (const Shape& shape : {Shape{2, 3, 5, 4}, Shape{5, 3}}) {
    const int64_t C = shape.back();
    BatchNormParams p;
    Tensor x = RandomTensor(shape, &rng), gamma = RandomTensor({C}, &rng, 0.5f, 1.5f);
    Tensor beta = RandomTensor({C}, &rng), r = RandomTensor(shape, &rng);
    Tensor rm = Filled({C}, 0.0f), rv = Filled({C}, 1.0f);
    Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({C}, DType::kF32);
    Tensor inv_std = Tensor::Empty({C}, DType::kF32);
    auto loss = [&] {
      BatchNormForwardTraining(x, gamma, beta, p, &rm, &rv, &y, &mean, &inv_std);
      return Dot(y, r);
    };
    loss();
    Tensor dx = Filled(shape, 7.0f), dgamma = Filled({C}, 7.0f), dbeta = Filled({C}, 7.0f);
    BatchNormBackward(x, r, gamma, mean, inv_std, &dx, &dgamma, &dbeta);
    const std::string name = ShapeString(shape);
    // dx sums to zero per channel, so it is small next to dgamma: a smaller step keeps the
    // truncation error of the (quadratic in x) variance below the tolerance.
    ExpectGradientNear("dx " + name, loss, &x, dx, 1e-3);
    ExpectGradientNear("dgamma " + name, loss, &gamma, dgamma);
    ExpectGradientNear("dbeta " + name, loss, &beta, dbeta);
  }
}

// y = relu(BN(x) + z): every input's gradient against finite differences. x and z are
// distinct values so that no pre-activation sits on the ReLU's kink within a step.
TEST(BatchNormTest, FusedAddReluMatchesFiniteDifferences) {
  Rng rng(9);
  const Shape shape{2, 3, 4, 5};
  const int64_t C = 5;
  BatchNormParams p;
  for (bool with_z : {true, false}) {
    for (bool relu : {true, false}) {
      Tensor x = testing::DistinctTensor(shape, &rng), z = testing::DistinctTensor(shape, &rng);
      Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f), beta = RandomTensor({C}, &rng);
      Tensor r = RandomTensor(shape, &rng);
      Tensor rm = Filled({C}, 0.0f), rv = Filled({C}, 1.0f);
      Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({C}, DType::kF32);
      Tensor inv_std = Tensor::Empty({C}, DType::kF32);
      const Tensor* zp = with_z ? &z : nullptr;
      auto loss = [&] {
        BatchNormAddReluForwardTraining(x, zp, gamma, beta, p, relu, &rm, &rv, &y, &mean, &inv_std);
        return Dot(y, r);
      };
      loss();
      int negatives = 0;
      for (int64_t i = 0; i < y.numel(); ++i) negatives += y.data<float>()[i] < 0.0f;
      EXPECT_EQ(negatives == 0, relu) << "relu " << relu;
      Tensor dx = Filled(shape, 7.0f), dz = Filled(shape, 7.0f);
      Tensor dgamma = Filled({C}, 7.0f), dbeta = Filled({C}, 7.0f);
      BatchNormAddReluBackward(x, y, r, gamma, mean, inv_std, relu, &dx,
                               with_z ? &dz : nullptr, &dgamma, &dbeta);
      const std::string name = std::string(with_z ? "with z" : "without z") + (relu ? ", relu" : "");
      ExpectGradientNear("dx " + name, loss, &x, dx, 1e-3);
      ExpectGradientNear("dgamma " + name, loss, &gamma, dgamma, 1e-3);
      ExpectGradientNear("dbeta " + name, loss, &beta, dbeta, 1e-3);
      if (with_z) ExpectGradientNear("dz " + name, loss, &z, dz, 1e-3);
    }
  }
}

TEST(BatchNormTest, BackwardInferenceMatchesFiniteDifferences) {
  Rng rng(5);
  const Shape shape{2, 4, 3, 5};
  BatchNormParams p;
  Tensor x = RandomTensor(shape, &rng), gamma = RandomTensor({5}, &rng, 0.5f, 1.5f);
  Tensor beta = RandomTensor({5}, &rng), r = RandomTensor(shape, &rng);
  Tensor rm = RandomTensor({5}, &rng), rv = RandomTensor({5}, &rng, 0.2f, 2.0f);
  Tensor y = Tensor::Empty(shape, DType::kF32);
  auto loss = [&] {
    BatchNormForwardInference(x, gamma, beta, rm, rv, p, &y);
    return Dot(y, r);
  };
  Tensor dx = Filled(shape, 7.0f), dgamma = Filled({5}, 7.0f), dbeta = Filled({5}, 7.0f);
  BatchNormBackwardInference(x, r, gamma, rm, rv, p, &dx, &dgamma, &dbeta);
  ExpectGradientNear("dx", loss, &x, dx);
  ExpectGradientNear("dgamma", loss, &gamma, dgamma);
  ExpectGradientNear("dbeta", loss, &beta, dbeta);
}

TEST(BatchNormDeathTest, ChannelMismatchNamesOpAndShapes) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor x = Tensor::Zeros({2, 2, 2, 3}, DType::kF32), y = Tensor::Zeros({2, 2, 2, 3}, DType::kF32);
  Tensor c3 = Tensor::Zeros({3}, DType::kF32), c4 = Tensor::Zeros({4}, DType::kF32);
  EXPECT_DEATH(BatchNormForwardInference(x, c4, c3, c3, c3, {}, &y),
               "BatchNormForwardInference: per-channel tensor float32\\[4\\].* does not match x "
               "\\[2,2,2,3\\]");
}

}  // namespace
}  // namespace tally
