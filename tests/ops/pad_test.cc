// PadLastDim and CropLastDim on the CPU (every dtype size), and on the GPU against the CPU
// (skipped, visibly, without a GPU).
#include <gtest/gtest.h>

#include <cstring>

#include "ops/backends.h"
#include "ops/ops.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::Gpu;
using testing::RandomTensor;

TEST(PadTest, PadsWithZerosAndCropsBack) {
  Rng rng(1);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kU8}) {
    Tensor x = RandomTensor({2, 3, 5, 3}, &rng, 1.0f, 9.0f).To(dtype);
    Tensor y = Tensor::Empty({2, 3, 5, 8}, dtype);
    y.Fill(5.0f);
    PadLastDim(x, &y);
    Tensor yf = y.To(DType::kF32), xf = x.To(DType::kF32);
    for (int64_t r = 0; r < 30; ++r) {
      for (int64_t c = 0; c < 8; ++c) {
        const float want = c < 3 ? xf.data<float>()[r * 3 + c] : 0.0f;
        ASSERT_EQ(yf.data<float>()[r * 8 + c], want) << DTypeName(dtype) << " row " << r << " col " << c;
      }
    }
    Tensor back = Tensor::Empty(x.shape(), dtype);
    CropLastDim(y, &back);
    EXPECT_EQ(0, std::memcmp(back.raw_data(), x.raw_data(), x.nbytes())) << DTypeName(dtype);
  }
}

TEST(PadDeathTest, OtherLeadingShapeNamesOp) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor x = Tensor::Zeros({2, 3}, DType::kF32), y = Tensor::Zeros({3, 4}, DType::kF32);
  EXPECT_DEATH(PadLastDim(x, &y), "PadLastDim: float32\\[2,3\\]@cpu:0 and float32\\[3,4\\]@cpu:0");
}

TEST(CudaPadTest, MatchesTheCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(2);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kU8}) {
    Tensor x = RandomTensor({4, 7, 7, 3}, &rng, 1.0f, 9.0f).To(dtype);
    Tensor y = Tensor::Empty({4, 7, 7, 4}, dtype);
    cpu::PadLastDim(x, &y);
    Tensor xg = Tensor::Empty(x.shape(), dtype, Gpu());
    xg.CopyFrom(x);
    Tensor yg = Tensor::Empty(y.shape(), dtype, Gpu());
    yg.Fill(3.0f);
    PadLastDim(xg, &yg);
    Tensor yh = Tensor::Empty(y.shape(), dtype);
    yh.CopyFrom(yg);
    EXPECT_EQ(0, std::memcmp(yh.raw_data(), y.raw_data(), y.nbytes())) << "pad " << DTypeName(dtype);
    Tensor backg = Tensor::Empty(x.shape(), dtype, Gpu());
    CropLastDim(yg, &backg);
    Tensor back = Tensor::Empty(x.shape(), dtype);
    back.CopyFrom(backg);
    EXPECT_EQ(0, std::memcmp(back.raw_data(), x.raw_data(), x.nbytes())) << "crop " << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace tally
