// The dynamic loss scale's rule: 2^16 to start, halved on every overflow (not below min),
// doubled after `window` clean steps in a row (not above max); fixed at 1 when disabled.
#include <gtest/gtest.h>

#include "worker/loss_scaler.h"

namespace tally {
namespace {

TEST(LossScalerTest, HalvesOnOverflowAndDoublesAfterTheWindow) {
  LossScaler s(LossScaleConfig(), /*enabled=*/true);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.Update(true);
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 32768.0f);
  s.Update(false);  // the 2000th clean step
  EXPECT_EQ(s.scale(), 65536.0f);
  for (int i = 0; i < 1000; ++i) s.Update(false);
  s.Update(true);   // an overflow restarts the count
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.overflows(), 2);
}

TEST(LossScalerTest, StaysWithinItsBounds) {
  LossScaleConfig c;
  c.init = 4.0f;
  c.min = 1.0f;
  c.max = 8.0f;
  c.window = 2;
  LossScaler s(c, true);
  for (int i = 0; i < 5; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 1.0f);
  for (int i = 0; i < 20; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 8.0f);
}

TEST(LossScalerTest, DisabledStaysAtOne) {
  LossScaler s(LossScaleConfig(), /*enabled=*/false);
  s.Update(true);
  for (int i = 0; i < 5000; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.overflows(), 1);
}

// A scaler restored from a device's scale and state goes on as that scaler would have.
TEST(LossScalerTest, RestoreContinuesFromTheGivenState) {
  LossScaleConfig c;
  c.window = 3;
  LossScaler original(c, true), restored(c, true);
  original.Update(true);
  original.Update(false);
  original.Update(false);
  restored.Restore(original.scale(), /*clean=*/2, original.overflows());
  EXPECT_EQ(restored.scale(), 32768.0f);
  EXPECT_EQ(restored.overflows(), 1);
  original.Update(false);  // the window's third clean step
  restored.Update(false);
  EXPECT_EQ(restored.scale(), 65536.0f);
  EXPECT_EQ(restored.scale(), original.scale());
}

}  // namespace
}  // namespace tally
