// LossScaleUpdate (ops/ops.h) against the host's LossScaler (worker/loss_scaler.h), step for
// step, over sequences that halve, double at the window's end, hit both clamps and run
// disabled; on the CPU, and on the GPU against the same sequences (skipped, visibly,
// without a GPU).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/ops/cuda_compare.h"
#include "worker/loss_scaler.h"

namespace tally {
namespace {

// A scale and its state on `device`, stepped by LossScaleUpdate.
class DeviceScale {
 public:
  DeviceScale(const LossScaleConfig& c, bool enabled, Device device) {
    p_.enabled = enabled;
    p_.window = c.window;
    p_.min = c.min;
    p_.max = c.max;
    scale_ = Tensor::Empty({1}, DType::kF32, device);
    scale_.Fill(enabled ? c.init : 1.0f);
    state_ = Tensor::Zeros({2}, DType::kI32, device);
    found_ = Tensor::Empty({1}, DType::kI32, device);
  }
  void Update(bool overflowed) {
    found_.Fill(overflowed ? 1.0f : 0.0f);
    LossScaleUpdate(p_, found_, &scale_, &state_);
  }
  float scale() const { return Host(scale_).data<float>()[0]; }
  int32_t clean() const { return Host(state_).data<int32_t>()[0]; }
  int32_t skipped() const { return Host(state_).data<int32_t>()[1]; }

 private:
  static Tensor Host(const Tensor& t) {
    Tensor h = Tensor::Empty(t.shape(), t.dtype());
    h.CopyFrom(t);
    return h;
  }
  LossScaleParams p_;
  Tensor scale_, state_, found_;
};

// Overflows as 1s: a run of clean steps through the window, overflows down to the minimum,
// clean runs up to the maximum, an overflow in mid-window.
std::vector<bool> Sequence() {
  std::vector<bool> steps;
  auto add = [&](bool overflow, int n) { steps.insert(steps.end(), n, overflow); };
  add(false, 7);   // window 3: doubles twice, then one clean step counted
  add(true, 6);    // halves to the minimum and stays there
  add(false, 20);  // doubles up to the maximum and stays there
  add(false, 2);
  add(true, 1);    // restarts the count
  add(false, 2);   // not yet a full window
  add(true, 1);
  return steps;
}

void CompareWithLossScaler(Device device) {
  LossScaleConfig c;
  c.init = 8.0f;
  c.min = 2.0f;
  c.max = 64.0f;
  c.window = 3;
  for (bool enabled : {true, false}) {
    LossScaler want(c, enabled);
    DeviceScale got(c, enabled, device);
    const std::vector<bool> steps = Sequence();
    bool hit_min = false, hit_max = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      want.Update(steps[i]);
      got.Update(steps[i]);
      const std::string what = std::string(enabled ? "enabled" : "disabled") + ", step " +
                               std::to_string(i) + (steps[i] ? " (overflow)" : " (clean)");
      ASSERT_EQ(got.scale(), want.scale()) << what;
      ASSERT_EQ(got.skipped(), want.overflows()) << what;
      hit_min |= want.scale() == c.min;
      hit_max |= want.scale() == c.max;
    }
    EXPECT_EQ(hit_min && hit_max, enabled) << "the sequence must reach both clamps";
    if (!enabled) {
      EXPECT_EQ(got.scale(), 1.0f);
    }
    EXPECT_EQ(got.skipped(), 8);
  }
}

TEST(LossScaleTest, MatchesLossScaler) { CompareWithLossScaler(Device::Cpu()); }

// The count of clean steps doubles the scale on the window's last step, and restarts.
TEST(LossScaleTest, CleanStepsCountInTheState) {
  LossScaleConfig c;
  c.init = 4.0f;
  c.window = 3;
  DeviceScale s(c, true, Device::Cpu());
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.clean(), 2);
  EXPECT_EQ(s.scale(), 4.0f);
  s.Update(false);
  EXPECT_EQ(s.clean(), 0);
  EXPECT_EQ(s.scale(), 8.0f);
  s.Update(false);
  s.Update(true);
  EXPECT_EQ(s.clean(), 0);
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_EQ(s.skipped(), 1);
}

TEST(LossScaleDeathTest, ChecksItsTensors) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor found = Tensor::Zeros({1}, DType::kI32), scale = Tensor::Zeros({1}, DType::kF32);
  Tensor state1 = Tensor::Zeros({1}, DType::kI32), state2 = Tensor::Zeros({2}, DType::kI32);
  EXPECT_DEATH(LossScaleUpdate(LossScaleParams(), found, &scale, &state1),
               "LossScaleUpdate: state int32\\[1\\]@cpu:0 must be int32 \\[2\\]");
  EXPECT_DEATH(LossScaleUpdate(LossScaleParams(), scale, &scale, &state2),
               "LossScaleUpdate: found float32\\[1\\]@cpu:0 must be int32 \\[1\\]");
}

TEST(CudaLossScaleTest, MatchesLossScaler) {
  TALLY_REQUIRE_GPU();
  CompareWithLossScaler(testing::Gpu());
}

}  // namespace
}  // namespace tally
