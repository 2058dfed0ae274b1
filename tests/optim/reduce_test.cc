#include "optim/reduce.h"

#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace tally {
namespace {

// A sum big enough to be split over threads equals the element-by-element sum in rank order.
TEST(SumInF32, SplitOverThreadsEqualsTheSerialSumInRankOrder) {
  const int64_t n = (int64_t{9} << 20) + 12345;  // several threads' worth, a ragged end
  Tensor a = Tensor::Empty({n}, DType::kF32), b32 = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    a.data<float>()[i] = static_cast<float>(i % 1000) * 1e-3f + 1e4f;
    b32.data<float>()[i] = static_cast<float>(i % 77) * 0.37f;
  }
  Tensor b16 = b32.To(DType::kF16);
  Tensor out = Tensor::Empty({n}, DType::kF32);
  SumInF32({a, b16, b32}, &out);
  for (int64_t i = 0; i < n; i += 997) {
    float expect = a.data<float>()[i];
    expect += HalfToFloat(b16.data<uint16_t>()[i]);
    expect += b32.data<float>()[i];
    ASSERT_EQ(out.data<float>()[i], expect) << "element " << i;
  }
  ASSERT_EQ(out.data<float>()[n - 1],
            a.data<float>()[n - 1] + HalfToFloat(b16.data<uint16_t>()[n - 1]) + b32.data<float>()[n - 1]);
}


// A pull's conversion, split over the worker pool for a large array, rounds every element as
// Tensor::To does, in each direction between the wire's dtypes; the same dtype is no copy.
TEST(ConvertForWire, MatchesTensorToInEveryDirection) {
  const int64_t n = (int64_t{3} << 20) + 4321;  // several pieces, a ragged end
  Tensor f32 = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) f32.data<float>()[i] = static_cast<float>(i % 4099) * 0.731f - 1500.0f;
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor src = f32.To(from);
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Tensor got = ConvertForWire(src, to), want = src.To(to);
      ASSERT_EQ(got.dtype(), to);
      ASSERT_EQ(got.numel(), n);
      if (from == to) {
        EXPECT_EQ(got.raw_data(), src.raw_data()) << DTypeName(from) << ": converted to itself, copied";
        continue;
      }
      ASSERT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0)
          << DTypeName(from) << " to " << DTypeName(to) << " differs from Tensor::To";
    }
  }
}

// A large array is checked in pieces over the worker pool: one NaN or Inf anywhere, in the
// first piece, the last element or between, is found in every wire dtype.
TEST(AllFinite, FindsOneBadValueAnywhereInALargeArray) {
  const int64_t n = (int64_t{2} << 20) + 777;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor ok = Tensor::Zeros({n}, DType::kF32).To(dtype);
    EXPECT_TRUE(AllFinite(ok)) << DTypeName(dtype);
    for (int64_t where : {int64_t{0}, n / 3, n - 1}) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        Tensor f32 = Tensor::Zeros({n}, DType::kF32);
        f32.data<float>()[where] = bad;
        EXPECT_FALSE(AllFinite(f32.To(dtype))) << DTypeName(dtype) << " " << bad << " at " << where;
      }
    }
  }
}

// The sum's finiteness found while summing, as AllFinite of the sum finds it: one bad value
// anywhere in any part, in every dtype, and two finite parts whose sum overflows fp32.
TEST(SumInF32AllFinite, IsTheSumAndAllFiniteOfItInOnePass) {
  const int64_t n = (int64_t{1} << 20) + 777;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<Tensor> parts;
    for (int r = 0; r < 3; ++r) {
      Tensor f = Tensor::Empty({n}, DType::kF32);
      for (int64_t i = 0; i < n; ++i) f.data<float>()[i] = 0.25f * static_cast<float>(r + 1) + 1e-3f * (i % 97);
      parts.push_back(f.To(dtype));
    }
    Tensor fused = Tensor::Empty({n}, DType::kF32), plain = Tensor::Empty({n}, DType::kF32);
    EXPECT_TRUE(SumInF32AllFinite(parts, &fused)) << DTypeName(dtype);
    SumInF32(parts, &plain);
    EXPECT_EQ(std::memcmp(fused.raw_data(), plain.raw_data(), plain.nbytes()), 0) << DTypeName(dtype);
    for (int64_t where : {int64_t{0}, n / 3, n - 1}) {
      std::vector<Tensor> bad = parts;
      Tensor f = bad[2].To(DType::kF32);
      f.data<float>()[where] = std::numeric_limits<float>::quiet_NaN();
      bad[2] = f.To(dtype);
      EXPECT_FALSE(SumInF32AllFinite(bad, &fused)) << DTypeName(dtype) << " NaN at " << where;
    }
  }
  Tensor big = Tensor::Empty({3}, DType::kF32);
  for (int i = 0; i < 3; ++i) big.data<float>()[i] = 3e38f;
  Tensor sum = Tensor::Empty({3}, DType::kF32);
  EXPECT_FALSE(SumInF32AllFinite({big, big}, &sum));  // 6e38 overflows to +Inf
  EXPECT_TRUE(SumInF32AllFinite({big}, &sum));
}

}  // namespace
}  // namespace tally
