// StepRates (server/step_rates.h): the learning rate of each step's update.
#include "server/step_rates.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

TEST(StepRatesTest, EachStepGetsTheRateOfTheLastSetLrAtOrBeforeIt) {
  StepRates lr;
  lr.Reset(0.5f);
  EXPECT_EQ(lr.For(0), 0.5f);
  lr.SetFrom(10, 0.25f, /*next_update=*/2);
  lr.SetFrom(5, 0.125f, 2);  // may come in any order
  EXPECT_EQ(lr.For(4), 0.5f);
  EXPECT_EQ(lr.For(5), 0.125f);
  EXPECT_EQ(lr.For(9), 0.125f);
  EXPECT_EQ(lr.For(10), 0.25f);
  EXPECT_EQ(lr.For(1000), 0.25f);
}

TEST(StepRatesTest, RatesNoUpdateToComeCanUseAreFoldedIntoTheBase) {
  StepRates lr;
  lr.Reset(1.f);
  lr.SetFrom(3, 2.f, /*next_update=*/1);
  lr.SetFrom(4, 3.f, /*next_update=*/6);  // steps up to 5 applied: 3's and 4's rates fold
  EXPECT_EQ(lr.For(6), 3.f);
  EXPECT_EQ(lr.For(0), 3.f);  // folded: no earlier step will ask
  lr.Reset(7.f);  // SET_OPTIMIZER again, or dist_async's SET_LR: every step
  EXPECT_EQ(lr.For(100), 7.f);
}

}  // namespace
}  // namespace tally
