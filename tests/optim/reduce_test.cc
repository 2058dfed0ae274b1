#include "optim/reduce.h"

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

}  // namespace
}  // namespace tally
