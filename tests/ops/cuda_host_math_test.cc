// The arithmetic the CUDA kernels share with the host, checked on the CPU so that it runs in
// every build, GPU or not: the multi-tensor launch's chunk mapping (ops/cuda/multi_tensor.cuh)
// and the per-row formulas of the loss and top-k kernels (ops/cuda/loss_math.cuh), against
// ResNet-50's real parameter sizes and the hand-worked values of tests/ops/loss_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "ops/cuda/loss_math.cuh"
#include "ops/cuda/multi_tensor.cuh"
#include "ops/random.h"
#include "tests/models/resnet50_sizes.h"

namespace tally {
namespace {

using cuda::ChunkSpan;
using cuda::kMultiTensorChunk;
using testing::ResNet50ParameterSizes;

// Maps every chunk and counts how often each element of each tensor is visited; also checks
// that chunks are full but for each tensor's last one, so blocks get even shares.
void ExpectExactCover(const std::vector<int64_t>& sizes) {
  const int n = static_cast<int>(sizes.size());
  std::vector<int64_t> chunk_begin(n + 1);
  const int64_t chunks = cuda::FillChunkBegin(sizes.data(), n, chunk_begin.data());
  int64_t want_chunks = 0;
  for (int64_t size : sizes) want_chunks += (size + kMultiTensorChunk - 1) / kMultiTensorChunk;
  ASSERT_EQ(chunks, want_chunks);
  std::vector<std::vector<uint8_t>> visits(n);
  for (int t = 0; t < n; ++t) visits[t].assign(sizes[t], 0);
  for (int64_t c = 0; c < chunks; ++c) {
    const ChunkSpan span = cuda::MapChunk(chunk_begin.data(), sizes.data(), n, c);
    ASSERT_GE(span.tensor, 0);
    ASSERT_LT(span.tensor, n);
    const int64_t size = sizes[span.tensor];
    ASSERT_LE(0, span.begin) << "chunk " << c;
    ASSERT_LT(span.begin, span.end) << "chunk " << c << " is empty";
    ASSERT_LE(span.end, size) << "chunk " << c;
    ASSERT_TRUE(span.end - span.begin == kMultiTensorChunk || span.end == size)
        << "chunk " << c << " of tensor " << span.tensor << " is short but not the last";
    for (int64_t i = span.begin; i < span.end; ++i) ++visits[span.tensor][i];
  }
  for (int t = 0; t < n; ++t) {
    for (int64_t i = 0; i < sizes[t]; ++i) {
      ASSERT_EQ(visits[t][i], 1) << "tensor " << t << " (size " << sizes[t] << ") element " << i;
    }
  }
}

TEST(MultiTensorChunksTest, ResNet50CoversEveryElementOnce) {
  const std::vector<int64_t> sizes = ResNet50ParameterSizes();
  ASSERT_EQ(sizes.size(), 161u);
  int64_t total = 0, smallest = sizes[0], largest = sizes[0];
  for (int64_t s : sizes) {
    total += s;
    smallest = std::min(smallest, s);
    largest = std::max(largest, s);
  }
  EXPECT_EQ(total, 25557032);
  EXPECT_EQ(smallest, 64);
  EXPECT_EQ(largest, 2359296);  // layer4's 3x3 convolutions
  ExpectExactCover(sizes);
}

TEST(MultiTensorChunksTest, EdgeSizes) {
  const int64_t c = kMultiTensorChunk;
  // Empty tensors among others (first, middle, last), exact multiples and one-off sizes.
  ExpectExactCover({0, 1, c, 0, 0, c + 1, c - 1, 2 * c, 0});
  ExpectExactCover({7});
  ExpectExactCover({0, 0, 3 * c + 5});
}

TEST(MultiTensorChunksTest, ChunkBeginsAndOwners) {
  const int64_t c = kMultiTensorChunk;
  const std::vector<int64_t> sizes = {c + 904, 64, 2 * c + 808};
  std::vector<int64_t> begin(4);
  EXPECT_EQ(cuda::FillChunkBegin(sizes.data(), 3, begin.data()), 6);
  EXPECT_EQ(begin, (std::vector<int64_t>{0, 2, 3, 6}));
  const int owners[6] = {0, 0, 1, 2, 2, 2};
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(cuda::MapChunk(begin.data(), sizes.data(), 3, k).tensor, owners[k]) << "chunk " << k;
  }
  const ChunkSpan last = cuda::MapChunk(begin.data(), sizes.data(), 3, 5);
  EXPECT_EQ(last.begin, 2 * c);
  EXPECT_EQ(last.end, 2 * c + 808);
}

// The row's loss and gradient from its statistics, as the kernel forms them.
struct RowResult {
  double loss;
  std::vector<float> grad;
};

RowResult FromStats(const std::vector<float>& x, int32_t label, float smoothing, float scale) {
  float max = x[0], sum_exp = 0.0f, sum_x = 0.0f;
  for (float v : x) max = std::max(max, v);
  for (float v : x) {
    sum_exp += std::exp(v - max);
    sum_x += v;
  }
  const int64_t k = static_cast<int64_t>(x.size());
  RowResult r;
  r.loss = cuda::SmoothedCrossEntropy(cuda::LogSumExp(max, sum_exp), x[label], sum_x, smoothing, k);
  const float log_sum_exp = std::log(sum_exp);
  for (int64_t j = 0; j < k; ++j) {
    r.grad.push_back(cuda::CrossEntropyGradient(
        x[j] - max, log_sum_exp, cuda::SmoothedTarget(j == label, smoothing, k), scale));
  }
  return r;
}

// The values of tests/ops/loss_test.cc: logits (1, 2, 3) with label 2, lse 3.40760596444438;
// logits (-1, 0, 1000) with label 0, whose loss 1001 a naive exp would overflow.
TEST(LossMathTest, HandWorkedRows) {
  const double lse0 = 3.40760596444438;
  const double p0[3] = {0.0900305731703805, 0.2447284710547977, 0.6652409557748219};
  RowResult a = FromStats({1, 2, 3}, 2, 0.0f, 0.5f);
  EXPECT_NEAR(a.loss, lse0 - 3.0, 1e-6);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(a.grad[j], 0.5 * (p0[j] - (j == 2)), 1e-7) << j;

  RowResult b = FromStats({-1, 0, 1000}, 0, 0.0f, 0.5f);
  EXPECT_EQ(b.loss, 1001.0);
  EXPECT_NEAR(b.grad[0], -0.5, 1e-7);
  EXPECT_NEAR(b.grad[1], 0.0, 1e-7);
  EXPECT_NEAR(b.grad[2], 0.5, 1e-7);

  // Smoothing 0.25 over K = 3 (MXNet's smooth_alpha): 0.25 / 2 = 0.125 off the label, 0.75 on it.
  RowResult c = FromStats({1, 2, 3}, 2, 0.25f, 1.0f);
  EXPECT_NEAR(c.loss, lse0 - 0.625 * 3 - 0.125 * 6, 1e-6);
  EXPECT_NEAR(c.grad[0], p0[0] - 0.125, 1e-7);
  EXPECT_NEAR(c.grad[2], p0[2] - 0.75, 1e-7);
  RowResult d = FromStats({-1, 0, 1000}, 0, 0.25f, 1.0f);
  EXPECT_NEAR(d.loss, 1000.0 + 0.625 - 0.125 * 999, 1e-9);
}

// An ImageNet-sized row against the CPU op's double-precision formulas.
TEST(LossMathTest, RandomRowsMatchDoubleReference) {
  Rng rng(3);
  const int64_t k = 1000;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x(k);
    for (float& v : x) v = -8.0f + 16.0f * rng.Uniform();
    const int32_t label = static_cast<int32_t>(rng.Below(k));
    const float s = 0.1f, scale = 1.0f / 32;
    double mx = x[0], sum_exp = 0.0, sum_x = 0.0;
    for (float v : x) mx = std::max<double>(mx, v);
    for (float v : x) {
      sum_exp += std::exp(v - mx);
      sum_x += v;
    }
    const double lse = mx + std::log(sum_exp);
    // MXNet's smooth_alpha: 1 - s on the label, s / (K - 1) on each other class.
    const double off = s / (k - 1);
    const double want = lse - (1.0 - s - off) * x[label] - off * sum_x;
    const RowResult got = FromStats(x, label, s, scale);
    EXPECT_NEAR(got.loss, want, 1e-5 * std::abs(want)) << "trial " << trial;
    double diff = 0.0, norm = 0.0, grad_sum = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const double target = j == label ? 1.0 - s : off;
      const double g = (std::exp(x[j] - lse) - target) * scale;
      diff += (got.grad[j] - g) * (got.grad[j] - g);
      norm += g * g;
      grad_sum += got.grad[j];
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-5) << "trial " << trial;
    EXPECT_NEAR(grad_sum, 0.0, 1e-6) << "softmax and target both sum to 1";
  }
}

// tests/ops/loss_test.cc's rows: ties rank ahead of the label.
TEST(LossMathTest, TopKTiesCountAgainst) {
  auto ahead = [](const std::vector<float>& x, int32_t label) {
    int n = 0;
    for (int64_t j = 0; j < static_cast<int64_t>(x.size()); ++j) {
      n += cuda::RanksAhead(j, label, x[j], x[label]) ? 1 : 0;
    }
    return n;
  };
  EXPECT_EQ(ahead({1, 3, 3, 0}, 1), 1);   // class 2 ties
  EXPECT_EQ(ahead({5, 1, 1, 1}, 0), 0);
  EXPECT_EQ(ahead({0, 0, 0, 0}, 3), 3);   // all tied: last
  EXPECT_EQ(ahead({0, 2, 1, -1}, 2), 1);
  EXPECT_TRUE(cuda::LabelInRange(0, 3));
  EXPECT_FALSE(cuda::LabelInRange(3, 3));
  EXPECT_FALSE(cuda::LabelInRange(-1, 3));
}

}  // namespace
}  // namespace tally
