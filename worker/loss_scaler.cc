#include "worker/loss_scaler.h"

#include <algorithm>

namespace tally {

LossScaler::LossScaler(const LossScaleConfig& config, bool enabled)
    : config_(config), enabled_(enabled), scale_(enabled ? config.init : 1.0f) {}

void LossScaler::Update(bool overflowed) {
  if (overflowed) ++overflows_;
  if (!enabled_) return;
  if (overflowed) {
    scale_ = std::max(scale_ * 0.5f, config_.min);
    clean_ = 0;
    return;
  }
  if (++clean_ >= config_.window) {
    scale_ = std::min(scale_ * 2.0f, config_.max);
    clean_ = 0;
  }
}

}  // namespace tally
