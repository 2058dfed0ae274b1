// Softmax cross-entropy and top-k accuracy against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::ExpectAllNear;
using testing::Filled;

Tensor Logits(const std::vector<std::vector<float>>& rows) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())},
                           DType::kF32);
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t j = 0; j < rows[r].size(); ++j) t.data<float>()[r * rows[0].size() + j] = rows[r][j];
  return t;
}

Tensor Labels(const std::vector<int32_t>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kI32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

// Row 0: logits (1, 2, 3), label 2: log(e + e^2 + e^3) = 3.40760596444438, and softmax
// (0.0900305732, 0.2447284711, 0.6652409558).
// Row 1: logits (-1, 0, 1000), label 0: a naive exp overflows; the loss is 1000 - (-1).
TEST(LossTest, CrossEntropyByHand) {
  Tensor logits = Logits({{1, 2, 3}, {-1, 0, 1000}});
  Tensor labels = Labels({2, 0});
  const double lse0 = 3.40760596444438;
  const double p0[3] = {0.0900305731703805, 0.2447284710547977, 0.6652409557748219};

  Tensor d = Filled({2, 3}, 7.0f);
  const double loss = SoftmaxCrossEntropy(logits, labels, 0.0f, 0.5f, &d);
  EXPECT_NEAR(loss, (lse0 - 3.0) + 1001.0, 1e-9);
  ExpectAllNear("dlogits", d, {0.5 * p0[0], 0.5 * p0[1], 0.5 * (p0[2] - 1), -0.5, 0.0, 0.5},
                1e-7, 1e-6);

  // Smoothing 0.375 (exact in binary) over K = 3: targets 0.125 off the label and 0.75 on
  // it; the loss is lse - 0.625 * x_label - 0.125 * sum(x).
  const double smoothed = SoftmaxCrossEntropy(logits, labels, 0.375f, 1.0f, &d);
  EXPECT_NEAR(smoothed, (lse0 - 0.625 * 3 - 0.125 * 6) + (1000.0 + 0.625 - 0.125 * 999), 1e-9);
  ExpectAllNear("smoothed dlogits", d,
                {p0[0] - 0.125, p0[1] - 0.125, p0[2] - 0.75, -0.75, -0.125, 0.875}, 1e-7, 1e-6);

  // Without dlogits only the loss is computed.
  EXPECT_NEAR(SoftmaxCrossEntropy(logits, labels, 0.0f, 1.0f, nullptr), loss, 1e-12);
}

TEST(LossTest, GradientMatchesFiniteDifferences) {
  Rng rng(1);
  Tensor logits = testing::RandomTensor({4, 10}, &rng, -3.0f, 3.0f);
  Tensor labels = Labels({0, 9, 3, 3});
  Tensor d = Tensor::Empty({4, 10}, DType::kF32);
  SoftmaxCrossEntropy(logits, labels, 0.1f, 0.25f, &d);
  auto loss = [&] { return 0.25 * SoftmaxCrossEntropy(logits, labels, 0.1f, 0.25f, nullptr); };
  testing::ExpectGradientNear("dlogits", loss, &logits, d, 1e-3);
}

TEST(LossTest, TopKCountsTiesAgainst) {
  Tensor logits = Logits({{1, 3, 3, 0},    // label 1 ties with class 2
                          {5, 1, 1, 1},    // label 0 clearly first
                          {0, 0, 0, 0},    // all tied: label 3 ranks last
                          {0, 2, 1, -1}}); // label 2 second
  Tensor labels = Labels({1, 0, 3, 2});
  EXPECT_EQ(TopKCorrect(logits, labels, 1), 1);  // row 1
  EXPECT_EQ(TopKCorrect(logits, labels, 2), 3);  // rows 0, 1, 3
  EXPECT_EQ(TopKCorrect(logits, labels, 3), 3);
  EXPECT_EQ(TopKCorrect(logits, labels, 4), 4);
}

TEST(LossDeathTest, LabelOutOfRangeNamesOp) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor logits = Logits({{1, 2, 3}});
  EXPECT_DEATH(SoftmaxCrossEntropy(logits, Labels({3}), 0, 1, nullptr),
               "SoftmaxCrossEntropy: label 3 of row 0 is outside \\[0, 3\\)");
}

}  // namespace
}  // namespace tally
