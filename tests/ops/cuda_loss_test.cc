// The CUDA softmax cross-entropy and top-k accuracy (ops/cuda/loss.cu) against the CPU
// reference, in fp32, fp16 and bf16 logits: the loss to 1e-5 of itself whatever the dtype
// (the GPU computes in fp32 from the same values), the gradient to the dtype's tolerance,
// top-k counts exactly, ties included; the same loss to the bit on every call; and a bad
// label named with its row. The *Accumulate forms against the CPU's, and against the
// returning ops on the same device: the same batch sum, added on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/backends.h"
#include "ops/device.h"
#include "ops/kahan.h"
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

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

Tensor RandomLabels(int64_t n, int64_t classes, Rng* rng) {
  Tensor t = Tensor::Empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng->Below(static_cast<uint32_t>(classes)));
  return t;
}

Tensor Labels(const std::vector<int32_t>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kI32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

void CompareCrossEntropy(DType t, int64_t n, int64_t k, float smoothing, uint64_t seed) {
  SCOPED_TRACE(std::string(DTypeName(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
               " smoothing " + std::to_string(smoothing));
  Rng rng(seed);
  const Tensor logits = Rounded(RandomTensor({n, k}, &rng, -6.0f, 6.0f), t);
  const Tensor labels = RandomLabels(n, k, &rng);
  const float grad_scale = 1.0f / static_cast<float>(n);
  Tensor d = Tensor::Empty({n, k}, DType::kF32);
  const double want = cpu::SoftmaxCrossEntropy(logits, labels, smoothing, grad_scale, &d);

  const Tensor lg = ToDevice(logits, t), yg = ToDevice(labels, DType::kI32);
  Tensor dg = Tensor::Empty({n, k}, t, Gpu());
  const double got = SoftmaxCrossEntropy(lg, yg, smoothing, grad_scale, &dg);
  EXPECT_NEAR(got, want, 1e-5 * std::abs(want) + 1e-9);
  ExpectClose("dlogits", dg, d, t);
  EXPECT_EQ(SoftmaxCrossEntropy(lg, yg, smoothing, grad_scale, nullptr), got)
      << "the loss without dlogits, and on a second call, is the same to the bit";
}

TEST(CudaLossTest, CrossEntropyMatchesCpu) {
  TALLY_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType t : kDTypes) {
    CompareCrossEntropy(t, 32, 1000, 0.1f, ++seed);    // ImageNet, smoothed
    CompareCrossEntropy(t, 32, 1000, 0.0f, ++seed);
    CompareCrossEntropy(t, 5, 3, 0.375f, ++seed);      // fewer classes than a warp
    CompareCrossEntropy(t, 3, 1, 0.0f, ++seed);        // one class: loss 0, gradient 0
    CompareCrossEntropy(t, 300, 10, 0.1f, ++seed);     // more rows than the final sum's threads
    CompareCrossEntropy(t, 2, 4099, 0.2f, ++seed);     // many elements per thread
  }
}

// tests/ops/loss_test.cc's rows on the GPU, where exp(1000) would overflow.
TEST(CudaLossTest, CrossEntropyByHand) {
  TALLY_REQUIRE_GPU();
  Tensor logits = Tensor::Empty({2, 3}, DType::kF32);
  const float values[6] = {1, 2, 3, -1, 0, 1000};
  std::copy(values, values + 6, logits.data<float>());
  const Tensor lg = ToDevice(logits, DType::kF32), yg = ToDevice(Labels({2, 0}), DType::kI32);
  Tensor dg = Tensor::Empty({2, 3}, DType::kF32, Gpu());
  const double lse0 = 3.40760596444438;
  EXPECT_NEAR(SoftmaxCrossEntropy(lg, yg, 0.0f, 0.5f, &dg), (lse0 - 3.0) + 1001.0, 1e-5);
  const Tensor d = testing::ToHostF32(dg);
  const double want[6] = {0.5 * 0.0900305731703805, 0.5 * 0.2447284710547977,
                          0.5 * (0.6652409557748219 - 1), -0.5, 0.0, 0.5};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(d.data<float>()[i], want[i], 1e-6) << i;
}

// 64 rows of 1000 logits from a handful of values, so that many classes tie with the label.
void TiedLogits(uint64_t seed, Tensor* logits, Tensor* labels) {
  Rng rng(seed);
  const int64_t n = 64, classes = 1000;
  *logits = Tensor::Empty({n, classes}, DType::kF32);
  for (int64_t i = 0; i < n * classes; ++i) logits->data<float>()[i] = static_cast<float>(rng.Below(8));
  *labels = RandomLabels(n, classes, &rng);
}

TEST(CudaLossTest, TopKMatchesCpuWithTies) {
  TALLY_REQUIRE_GPU();
  Tensor logits, labels;
  TiedLogits(7, &logits, &labels);
  for (DType t : kDTypes) {
    const Tensor lg = ToDevice(logits, t), yg = ToDevice(labels, DType::kI32);
    for (int k : {1, 5, 100, 999, 1000, 5000}) {
      EXPECT_EQ(TopKCorrect(lg, yg, k), cpu::TopKCorrect(logits, labels, k))
          << DTypeName(t) << " k=" << k;
    }
  }
  // Random logits too, where each k gives a different count.
  Rng rng(8);
  const Tensor smooth = RandomTensor(logits.shape(), &rng);
  const Tensor sg = ToDevice(smooth, DType::kF32), yg = ToDevice(labels, DType::kI32);
  for (int k : {1, 5, 500}) EXPECT_EQ(TopKCorrect(sg, yg, k), cpu::TopKCorrect(smooth, labels, k));
}

TEST(CudaLossTest, SecondCallAllocatesNothing) {
  TALLY_REQUIRE_GPU();
  Rng rng(8);
  const Tensor lg = ToDevice(RandomTensor({32, 1000}, &rng), DType::kF16);
  const Tensor yg = ToDevice(RandomLabels(32, 1000, &rng), DType::kI32);
  Tensor dg = Tensor::Empty({32, 1000}, DType::kF16, Gpu());
  SoftmaxCrossEntropy(lg, yg, 0.1f, 1.0f / 32, &dg);
  TopKCorrect(lg, yg, 5);
  const int64_t mallocs = GetDeviceMemoryStats(0).device_mallocs;
  SoftmaxCrossEntropy(lg, yg, 0.1f, 1.0f / 32, &dg);
  TopKCorrect(lg, yg, 5);
  EXPECT_EQ(GetDeviceMemoryStats(0).device_mallocs, mallocs);
}

Tensor Floats(const std::vector<float>& v, Device device) {
  Tensor h = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::copy(v.begin(), v.end(), h.data<float>());
  Tensor t = Tensor::Empty(h.shape(), DType::kF32, device);
  t.CopyFrom(h);
  return t;
}

void CompareAccumulate(DType t, int64_t n, int64_t k, float smoothing, bool with_scale,
                       uint64_t seed) {
  SCOPED_TRACE(std::string(DTypeName(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
               (with_scale ? " with a scale tensor" : " without scale"));
  Rng rng(seed);
  const Tensor logits = Rounded(RandomTensor({n, k}, &rng, -6.0f, 6.0f), t);
  const Tensor labels = RandomLabels(n, k, &rng);
  const float grad_scale = 1.0f / static_cast<float>(n);
  const Tensor scale = Floats({512.0f}, Device::Cpu()), scale_g = Floats({512.0f}, Gpu());

  Tensor d = Tensor::Empty({n, k}, DType::kF32);
  Tensor sum = Floats({10.0f, 0.0f}, Device::Cpu());
  cpu::SoftmaxCrossEntropyAccumulate(logits, labels, smoothing, grad_scale,
                                     with_scale ? &scale : nullptr, &d, &sum);
  cpu::SoftmaxCrossEntropyAccumulate(logits, labels, smoothing, grad_scale,
                                     with_scale ? &scale : nullptr, &d, &sum);

  const Tensor lg = ToDevice(logits, t), yg = ToDevice(labels, DType::kI32);
  Tensor dg = Tensor::Empty({n, k}, t, Gpu());
  Tensor sum_g = Floats({10.0f, 0.0f}, Gpu());
  SoftmaxCrossEntropyAccumulate(lg, yg, smoothing, grad_scale, with_scale ? &scale_g : nullptr,
                                &dg, &sum_g);
  SoftmaxCrossEntropyAccumulate(lg, yg, smoothing, grad_scale, with_scale ? &scale_g : nullptr,
                                &dg, &sum_g);
  const Tensor got = testing::ToHostF32(sum_g);
  const double want = static_cast<double>(sum.data<float>()[0]) + sum.data<float>()[1];
  EXPECT_NEAR(got.data<float>()[0] + static_cast<double>(got.data<float>()[1]), want,
              1e-5 * std::abs(want));
  ExpectClose("dlogits", dg, d, t);

  // On one device the accumulated sum is the returned loss added twice, to the bit.
  const double batch = SoftmaxCrossEntropy(lg, yg, smoothing, grad_scale, nullptr);
  float acc[2] = {10.0f, 0.0f};
  KahanAdd(batch, &acc[0], &acc[1]);
  KahanAdd(batch, &acc[0], &acc[1]);
  EXPECT_EQ(got.data<float>()[0], acc[0]);
  EXPECT_EQ(got.data<float>()[1], acc[1]);
}

TEST(CudaLossTest, AccumulateMatchesCpu) {
  TALLY_REQUIRE_GPU();
  uint64_t seed = 20;
  for (DType t : kDTypes) {
    for (bool with_scale : {false, true}) {
      CompareAccumulate(t, 32, 1000, 0.1f, with_scale, ++seed);
      CompareAccumulate(t, 300, 10, 0.0f, with_scale, ++seed);
    }
  }
}

TEST(CudaLossTest, TopKAccumulateMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Tensor logits, labels;
  TiedLogits(21, &logits, &labels);
  for (DType t : kDTypes) {
    const Tensor lg = ToDevice(logits, t), yg = ToDevice(labels, DType::kI32);
    Tensor count = Tensor::Zeros({1}, DType::kI32, Gpu());
    int64_t want = 0;
    for (int k : {1, 5, 100, 1000}) {
      TopKCorrectAccumulate(lg, yg, k, &count);
      want += cpu::TopKCorrect(logits, labels, k);
    }
    Tensor host = Tensor::Empty({1}, DType::kI32);
    host.CopyFrom(count);
    EXPECT_EQ(host.data<int32_t>()[0], want) << DTypeName(t);
  }
}

// A bad label cannot fail the op without a wait: the loss sum and the row's gradient turn NaN.
TEST(CudaLossTest, AccumulateWithABadLabelMakesTheSumNaN) {
  TALLY_REQUIRE_GPU();
  Rng rng(22);
  const Tensor lg = ToDevice(RandomTensor({4, 3}, &rng), DType::kF32);
  const Tensor yg = ToDevice(Labels({0, 2, 3, 1}), DType::kI32);
  Tensor dg = Tensor::Empty({4, 3}, DType::kF32, Gpu());
  Tensor sum = Floats({1.0f, 0.0f}, Gpu());
  SoftmaxCrossEntropyAccumulate(lg, yg, 0.0f, 1.0f, nullptr, &dg, &sum);
  EXPECT_TRUE(std::isnan(testing::ToHostF32(sum).data<float>()[0]));
  // The bad row's gradient is NaN, so the step's finite check skips it; the others are finite.
  const Tensor d = testing::ToHostF32(dg);
  for (int64_t i = 0; i < d.numel(); ++i) {
    EXPECT_EQ(std::isnan(d.data<float>()[i]), i / 3 == 2) << "element " << i;
  }
}

TEST(CudaLossDeathTest, LabelOutOfRangeNamesOpAndRow) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Rng rng(9);
  const Tensor lg = ToDevice(RandomTensor({4, 3}, &rng), DType::kF32);
  // The first bad row is named, not the largest or the last.
  const Tensor yg = ToDevice(Labels({0, 2, 3, -1}), DType::kI32);
  EXPECT_DEATH(SoftmaxCrossEntropy(lg, yg, 0, 1, nullptr),
               "SoftmaxCrossEntropy: label 3 of row 2 is outside \\[0, 3\\)");
  const Tensor yg2 = ToDevice(Labels({0, -1, 1, 1}), DType::kI32);
  EXPECT_DEATH(TopKCorrect(lg, yg2, 1), "TopKCorrect: label -1 of row 1 is outside \\[0, 3\\)");
}

}  // namespace
}  // namespace tally
