// SliceAggregator (server/slice_aggregator.h) alone: gathering a synchronous step's pushes
// in any order, remembering asynchronous ones, and the sum's order and buffer.
#include "server/slice_aggregator.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace tally {
namespace {

Tensor F32(const std::vector<float>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> Floats(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

TEST(SliceAggregatorTest, ASyncStepIsReadyOnceEveryWorkerPushedAndInStepOrder) {
  SliceAggregator agg(2, 1);
  SliceAggregator::Step st;
  agg.AddSync(1, 0, F32({1}), 1.f);  // step 1 before step 0 is complete
  agg.AddSync(0, 1, F32({2}), 1.f);
  EXPECT_FALSE(agg.TakeReady(-1, &st));
  agg.AddSync(1, 1, F32({3}), 1.f);
  EXPECT_FALSE(agg.TakeReady(-1, &st));  // step 1 is complete, but step 0 comes first
  EXPECT_TRUE(agg.Counted(false, 0, 1, -1));
  EXPECT_FALSE(agg.Counted(false, 0, 0, -1));
  agg.AddSync(0, 0, F32({4}), 1.f);
  ASSERT_TRUE(agg.TakeReady(-1, &st));
  EXPECT_EQ(Floats(st.grads[0]), std::vector<float>{4});
  EXPECT_EQ(Floats(st.grads[1]), std::vector<float>{2});
  ASSERT_TRUE(agg.TakeReady(0, &st));
  EXPECT_EQ(Floats(st.grads[0]), std::vector<float>{1});
  EXPECT_FALSE(agg.TakeReady(1, &st));
  EXPECT_TRUE(agg.Counted(false, 1, 0, /*applied=*/1));  // applied steps count as pushed
}

TEST(SliceAggregatorTest, AStepKeepsItsFirstPushsGradientScale) {
  SliceAggregator agg(2, 1);
  EXPECT_EQ(agg.AddSync(0, 1, F32({1}), 4.f), 4.f);
  EXPECT_EQ(agg.AddSync(0, 0, F32({1}), 2.f), 4.f);
  SliceAggregator::Step st;
  ASSERT_TRUE(agg.TakeReady(-1, &st));
  EXPECT_EQ(st.scale, 4.f);
}

TEST(SliceAggregatorTest, AsyncRemembersEachWorkersStepsOutOfOrder) {
  SliceAggregator agg(2, 1);
  agg.NoteAsync(1, 0);
  EXPECT_TRUE(agg.Counted(true, 1, 0, -1));
  EXPECT_FALSE(agg.Counted(true, 0, 0, -1));
  EXPECT_FALSE(agg.Counted(true, 1, 1, 5));  // async ignores `applied`: another worker's step
  agg.NoteAsync(0, 0);
  EXPECT_TRUE(agg.Counted(true, 0, 0, -1));
}

TEST(SliceAggregatorTest, SumsInGivenOrderAndLeavesAHeldSumAlone) {
  SliceAggregator agg(3, 2);
  // In fp32, (1e8 + -1e8) + 1 = 1 but (1 + 1e8) + -1e8 = 0: the order shows in the result.
  Tensor a = agg.Sum({F32({1e8f, 1e8f}), F32({-1e8f, -1e8f}), F32({1, 2})});
  EXPECT_EQ(Floats(a), (std::vector<float>{1, 2}));
  Tensor b = agg.Sum({F32({1, 1}), F32({1, 1}), F32({1, 1})});  // `a` still held here
  EXPECT_NE(a.storage(), b.storage());
  EXPECT_EQ(Floats(a), (std::vector<float>{1, 2}));
  const void* where = b.raw_data();
  b = Tensor();
  a = Tensor();
  Tensor c = agg.Sum({F32({2, 2}), F32({2, 2}), F32({2, 2})});  // released: reused
  EXPECT_EQ(c.raw_data(), where);
  EXPECT_EQ(Floats(c), (std::vector<float>{6, 6}));
}

TEST(SliceAggregatorTest, OneF32PushIsItsOwnSumAndASumThatBecameValuesIsNotReused) {
  SliceAggregator agg(1, 2);
  Tensor push = F32({1, 2});
  EXPECT_EQ(agg.Sum({push}).storage(), push.storage());
  SliceAggregator two(2, 2);
  Tensor sum = two.Sum({F32({1, 1}), F32({1, 1})});
  Tensor old_values = F32({9, 9});
  const void* old_where = old_values.raw_data();
  two.SumBecameValues(sum, old_values);
  old_values = Tensor();  // the caller's copy goes: the buffer is the only holder
  Tensor next = two.Sum({F32({1, 1}), F32({2, 2})});
  EXPECT_EQ(next.raw_data(), old_where);  // into the old values, not over `sum`
  EXPECT_EQ(Floats(sum), (std::vector<float>{2, 2}));
}

}  // namespace
}  // namespace tally
