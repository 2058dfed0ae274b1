// Softmax cross-entropy and top-k accuracy against values worked out by hand; their
// *Accumulate forms (device-resident step results) against them, and the Kahan sum against
// a plain fp32 running sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

  // Smoothing 0.25 over K = 3, MXNet's smooth_alpha: 1 - 0.25 = 0.75 on the label and
  // 0.25 / (K - 1) = 0.125 off it; the loss is lse - 0.625 * x_label - 0.125 * sum(x).
  const double smoothed = SoftmaxCrossEntropy(logits, labels, 0.25f, 1.0f, &d);
  EXPECT_NEAR(smoothed, (lse0 - 0.625 * 3 - 0.125 * 6) + (1000.0 + 0.625 - 0.125 * 999), 1e-9);
  ExpectAllNear("smoothed dlogits", d,
                {p0[0] - 0.125, p0[1] - 0.125, p0[2] - 0.75, -0.75, -0.125, 0.875}, 1e-7, 1e-6);

  // Without dlogits only the loss is computed.
  EXPECT_NEAR(SoftmaxCrossEntropy(logits, labels, 0.0f, 1.0f, nullptr), loss, 1e-12);
}

// MXNet's SoftmaxOutput with smooth_alpha a (mshadow's SmoothSoftmaxGrad): the gradient is
// softmax - 1 + a at the label and softmax - a / (K - 1) elsewhere; the loss is the cross-entropy
// against that target. Reference: the target written out and -sum t log(softmax) in double.
TEST(LossTest, LabelSmoothingIsMxnetsSmoothAlpha) {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f};
  const int label = 3;
  const double alpha = 0.2;  // 0.8 on the label, 0.05 on each of the 4 others
  double sum_exp = 0;
  for (float v : x) sum_exp += std::exp(static_cast<double>(v));
  double want_loss = 0;
  std::vector<double> want_grad;
  for (int j = 0; j < 5; ++j) {
    const double p = std::exp(static_cast<double>(x[j])) / sum_exp;
    const double t = j == label ? 1 - alpha : alpha / 4;
    want_loss -= t * std::log(p);
    want_grad.push_back(0.5 * (j == label ? p - 1 + alpha : p - alpha / 4));
  }
  Tensor logits = Logits({{x[0], x[1], x[2], x[3], x[4]}});
  Tensor d = Tensor::Empty({1, 5}, DType::kF32);
  EXPECT_NEAR(SoftmaxCrossEntropy(logits, Labels({label}), 0.2f, 0.5f, &d), want_loss, 1e-6);
  ExpectAllNear("dlogits", d, want_grad, 1e-7, 1e-6);
  // With two classes the other class takes all of alpha: targets 0.8 and 0.2.
  Tensor two = Logits({{0.0f, 0.0f}});
  EXPECT_NEAR(SoftmaxCrossEntropy(two, Labels({0}), 0.2f, 1.0f, nullptr), std::log(2.0), 1e-9);
  Tensor d2 = Tensor::Empty({1, 2}, DType::kF32);
  SoftmaxCrossEntropy(two, Labels({0}), 0.2f, 1.0f, &d2);
  ExpectAllNear("two classes", d2, {0.5 - 0.8, 0.5 - 0.2}, 1e-7, 1e-6);
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

Tensor Floats(const std::vector<float>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// The loss is added to a running (sum, compensation) pair and the gradient is
// SoftmaxCrossEntropy's with grad_scale * scale[0]: bit for bit, with a scale tensor or none.
TEST(LossTest, AccumulateEqualsSoftmaxCrossEntropy) {
  Rng rng(2);
  Tensor logits = testing::RandomTensor({16, 10}, &rng, -4.0f, 4.0f);
  Tensor labels = Labels({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 8, 7, 6, 5, 4});
  for (bool with_scale : {false, true}) {
    SCOPED_TRACE(with_scale ? "scale tensor" : "no scale");
    const float grad_scale = 1.0f / 16, s = 1024.0f;
    const Tensor scale = Floats({s});
    Tensor want_d = Tensor::Empty({16, 10}, DType::kF32);
    const double want_loss = SoftmaxCrossEntropy(logits, labels, 0.1f,
                                                 with_scale ? grad_scale * s : grad_scale, &want_d);
    Tensor d = Tensor::Empty({16, 10}, DType::kF32);
    Tensor loss_sum = Floats({100.0f, 0.0f});
    SoftmaxCrossEntropyAccumulate(logits, labels, 0.1f, grad_scale,
                                  with_scale ? &scale : nullptr, &d, &loss_sum);
    EXPECT_EQ(0, std::memcmp(d.raw_data(), want_d.raw_data(), d.nbytes()));
    const float* acc = loss_sum.data<float>();
    EXPECT_EQ(acc[0], static_cast<float>(100.0 + want_loss));
    EXPECT_NEAR(static_cast<double>(acc[0]) + acc[1], 100.0 + want_loss, 1e-10);
    // A second batch adds on.
    SoftmaxCrossEntropyAccumulate(logits, labels, 0.1f, grad_scale,
                                  with_scale ? &scale : nullptr, &d, &loss_sum);
    EXPECT_NEAR(static_cast<double>(acc[0]) + acc[1], 100.0 + 2 * want_loss, 1e-10);
  }
}

// 20000 batches of loss ~0.41 onto a total that starts at 1e5, where an fp32 ulp is 0.0078:
// a plain fp32 running sum drifts by tens, the compensated one stays within an ulp (and
// sum + compensation much closer still) of the double reference.
TEST(LossTest, AccumulateIsCompensated) {
  Tensor logits = Logits({{1, 2, 3}});
  Tensor labels = Labels({2});
  Tensor d = Tensor::Empty({1, 3}, DType::kF32);
  const double batch = SoftmaxCrossEntropy(logits, labels, 0.0f, 1.0f, nullptr);
  Tensor loss_sum = Floats({1e5f, 0.0f});
  double reference = 1e5;
  float naive = 1e5f;
  for (int i = 0; i < 20000; ++i) {
    SoftmaxCrossEntropyAccumulate(logits, labels, 0.0f, 1.0f, nullptr, &d, &loss_sum);
    reference += batch;
    naive += static_cast<float>(batch);
  }
  const float* acc = loss_sum.data<float>();
  const double naive_error = std::abs(naive - reference);
  const double sum_error = std::abs(acc[0] - reference);
  const double total_error = std::abs(static_cast<double>(acc[0]) + acc[1] - reference);
  EXPECT_GT(naive_error, 1.0) << "the case must defeat a plain fp32 sum";
  EXPECT_LE(sum_error, 0.0079) << "within an fp32 ulp of 1.08e5";
  EXPECT_LT(total_error, 1e-4);
}

TEST(LossTest, TopKAccumulateAddsToTheCount) {
  Tensor logits = Logits({{1, 3, 3, 0}, {5, 1, 1, 1}, {0, 0, 0, 0}, {0, 2, 1, -1}});
  Tensor labels = Labels({1, 0, 3, 2});
  Tensor count = Tensor::Empty({1}, DType::kI32);
  count.data<int32_t>()[0] = 7;
  TopKCorrectAccumulate(logits, labels, 1, &count);  // + 1
  TopKCorrectAccumulate(logits, labels, 2, &count);  // + 3
  TopKCorrectAccumulate(logits, labels, 4, &count);  // + 4
  EXPECT_EQ(count.data<int32_t>()[0], 7 + 1 + 3 + 4);
}

TEST(LossDeathTest, AccumulateChecksItsScalars) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor logits = Logits({{1, 2, 3}});
  Tensor labels = Labels({0});
  Tensor d = Tensor::Empty({1, 3}, DType::kF32);
  Tensor one = Floats({0.0f}), two = Floats({0.0f, 0.0f});
  EXPECT_DEATH(SoftmaxCrossEntropyAccumulate(logits, labels, 0, 1, nullptr, &d, &one),
               "SoftmaxCrossEntropyAccumulate: loss_sum float32\\[1\\]@cpu:0 must be float32 "
               "\\[2\\]");
  EXPECT_DEATH(SoftmaxCrossEntropyAccumulate(logits, labels, 0, 1, &two, &d, &two),
               "SoftmaxCrossEntropyAccumulate: scale float32\\[2\\]@cpu:0 must be float32 "
               "\\[1\\]");
  EXPECT_DEATH(SoftmaxCrossEntropyAccumulate(logits, labels, 0, 1, nullptr, nullptr, &two),
               "SoftmaxCrossEntropyAccumulate: dlogits is required");
  EXPECT_DEATH(TopKCorrectAccumulate(logits, labels, 1, &one),
               "TopKCorrectAccumulate: count float32\\[1\\]@cpu:0 must be int32 \\[1\\]");
}

TEST(LossDeathTest, LabelOutOfRangeNamesOp) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor logits = Logits({{1, 2, 3}});
  EXPECT_DEATH(SoftmaxCrossEntropy(logits, Labels({3}), 0, 1, nullptr),
               "SoftmaxCrossEntropy: label 3 of row 0 is outside \\[0, 3\\)");
}

}  // namespace
}  // namespace tally
