// AllFinite and NonFiniteFlag on the CPU for every float dtype and every kind of non-finite
// value, and on the GPU against the same cases (skipped, visibly, without a GPU).
#include <gtest/gtest.h>

#include <limits>

#include "ops/backends.h"
#include "ops/ops.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

// Two tensors, one large, for each dtype; `bad` (if finite: nothing) written at `where` in
// the large one.
std::vector<Tensor> Case(DType dtype, float bad, int64_t where) {
  Rng rng(1);
  Tensor small = testing::RandomTensor({7}, &rng);
  Tensor large = testing::RandomTensor({3, 5000}, &rng, -6e4f, 6e4f);
  if (where >= 0) large.data<float>()[where] = bad;
  return {small.To(dtype), large.To(dtype)};
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(FiniteTest, FindsEveryNonFiniteValue) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_TRUE(AllFinite(Case(dtype, 0.0f, -1))) << DTypeName(dtype);
    for (float bad : {kInf, -kInf, kNan}) {
      for (int64_t where : {int64_t{0}, int64_t{4097}, int64_t{14999}}) {
        EXPECT_FALSE(AllFinite(Case(dtype, bad, where))) << DTypeName(dtype) << " " << bad << " at " << where;
      }
    }
  }
  // 7e4 overflows fp16 (max 65504) into inf: found, as the GPU's fp16 gradients would be.
  EXPECT_FALSE(AllFinite(Case(DType::kF16, 7e4f, 3)));
  EXPECT_TRUE(AllFinite(Case(DType::kBF16, 7e4f, 3)));
  EXPECT_TRUE(AllFinite({}));
}

int32_t Flag(const std::vector<Tensor>& tensors, Device device) {
  Tensor found = Tensor::Empty({1}, DType::kI32, device);
  found.Fill(7);  // written on every call, whatever it held
  NonFiniteFlag(tensors, &found);
  Tensor host = Tensor::Empty({1}, DType::kI32);
  host.CopyFrom(found);
  return host.data<int32_t>()[0];
}

TEST(FiniteTest, NonFiniteFlagIsZeroOrOne) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(Flag(Case(dtype, 0.0f, -1), Device::Cpu()), 0) << DTypeName(dtype);
    for (float bad : {kInf, -kInf, kNan}) {
      for (int64_t where : {int64_t{0}, int64_t{4097}, int64_t{14999}}) {
        EXPECT_EQ(Flag(Case(dtype, bad, where), Device::Cpu()), 1)
            << DTypeName(dtype) << " " << bad << " at " << where;
      }
    }
  }
  EXPECT_EQ(Flag({}, Device::Cpu()), 0);
}

TEST(FiniteDeathTest, NonFiniteFlagChecksFound) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor wrong = Tensor::Zeros({1}, DType::kF32);
  EXPECT_DEATH(NonFiniteFlag(Case(DType::kF32, 0.0f, -1), &wrong),
               "NonFiniteFlag: found float32\\[1\\]@cpu:0 must be int32 \\[1\\]");
}

TEST(CudaFiniteTest, MatchesTheCpu) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (float bad : {0.0f, kInf, -kInf, kNan}) {
      for (int64_t where : {int64_t{0}, int64_t{4097}, int64_t{14999}}) {
        std::vector<Tensor> host = Case(dtype, bad, where);
        std::vector<Tensor> gpu;
        for (const Tensor& t : host) gpu.push_back(testing::ToDevice(t, dtype));
        EXPECT_EQ(AllFinite(gpu), cpu::AllFinite(host)) << DTypeName(dtype) << " " << bad << " at " << where;
        EXPECT_EQ(Flag(gpu, testing::Gpu()), Flag(host, Device::Cpu()))
            << "NonFiniteFlag " << DTypeName(dtype) << " " << bad << " at " << where;
      }
    }
  }
  EXPECT_EQ(Flag({}, testing::Gpu()), 0);
}

}  // namespace
}  // namespace tally
