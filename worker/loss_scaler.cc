#include "worker/loss_scaler.h"

#include "ops/loss_scale_rule.h"

namespace tally {

LossScaler::LossScaler(const LossScaleConfig& config, bool enabled)
    : config_(config), enabled_(enabled), scale_(enabled ? config.init : 1.0f) {}

// The rule is ops/loss_scale_rule.h's, which LossScaleUpdate also applies on the device, so
// a scale kept there follows this one step for step.
void LossScaler::Update(bool overflowed) {
  LossScaleParams p;
  p.enabled = enabled_;
  p.window = config_.window;
  p.min = config_.min;
  p.max = config_.max;
  LossScaleStep(p, overflowed, &scale_, &clean_, &overflows_);
}

void LossScaler::Restore(float scale, int32_t clean, int64_t overflows) {
  scale_ = scale;
  clean_ = clean;
  overflows_ = overflows;
}

}  // namespace tally
