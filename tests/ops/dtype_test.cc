#include "base/dtype.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "ops/random.h"

namespace tally {
namespace {

float Bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

TEST(DType, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie, even stays
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(HalfToFloat(FloatToHalf(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(65520.0f))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::ldexp(1.0f, -26))), 0.0f);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(DType, BulkConversionsEqualTheScalarOnes) {
  Rng rng(3);
  std::vector<float> x(1037);
  for (size_t i = 0; i < x.size(); ++i) {
    // Magnitudes from subnormal to overflow, and a few specials.
    x[i] = rng.Normal() * std::ldexp(1.0f, static_cast<int>(rng.Below(50)) - 30);
  }
  x[5] = INFINITY;
  x[6] = -INFINITY;
  x[7] = Bits(0x7fc00001u);
  std::vector<uint16_t> h(x.size()), b(x.size());
  FloatToHalf(x.data(), h.data(), x.size());
  FloatToBFloat16(x.data(), b.data(), x.size());
  std::vector<float> hf(x.size()), bf(x.size());
  HalfToFloat(h.data(), hf.data(), x.size());
  BFloat16ToFloat(b.data(), bf.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 7) {
      EXPECT_TRUE(std::isnan(hf[i]) && std::isnan(bf[i]));
      continue;
    }
    EXPECT_EQ(h[i], FloatToHalf(x[i])) << x[i];
    EXPECT_EQ(b[i], FloatToBFloat16(x[i])) << x[i];
    EXPECT_EQ(hf[i], HalfToFloat(h[i]));
    EXPECT_EQ(bf[i], BFloat16ToFloat(b[i]));
  }
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
}

TEST(DType, ParsesMxnetAndShortNames) {
  DType t;
  ASSERT_TRUE(ParseDType("float16", &t).ok());
  EXPECT_EQ(t, DType::kF16);
  ASSERT_TRUE(ParseDType("bf16", &t).ok());
  EXPECT_EQ(t, DType::kBF16);
  Status s = ParseDType("float64", &t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("float64"), std::string::npos);
  EXPECT_EQ(DTypeSize(DType::kU8), 1u);
  EXPECT_STREQ(DTypeName(DType::kBF16), "bfloat16");
}

}  // namespace
}  // namespace tally
