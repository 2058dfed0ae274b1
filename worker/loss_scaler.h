// Dynamic loss scaling for fp16 training: the loss (and so every gradient) is multiplied by
// a scale large enough that small gradients do not flush to zero in fp16, and lowered when
// gradients overflow.
//
//   LossScaler scaler(cfg.loss_scale);            // starts at 2^16
//   ... backward with dlogits multiplied by scaler.scale(); the update divides it back ...
//   scaler.Update(/*overflowed=*/step_was_skipped);
//
// Rule: on a step whose gradients hold inf or NaN (the kvstore skips it everywhere) the scale
// halves, down to min; after `window` clean steps in a row it doubles, up to max. Every
// worker of a job sees the same skipped steps, so every worker's scale is the same. The rule
// is ops/loss_scale_rule.h's, shared with the op LossScaleUpdate that keeps a scale on a GPU.
// A LossScaler is a value; not thread-safe.
#pragma once

#include <cstdint>

namespace tally {

struct LossScaleConfig {
  float init = 65536.0f;  // 2^16
  int window = 2000;      // clean steps before the scale doubles
  float min = 1.0f;
  float max = 16777216.0f;  // 2^24
};

class LossScaler {
 public:
  LossScaler() = default;
  // enabled false: the scale stays 1 (fp32 and bf16, whose range needs none).
  LossScaler(const LossScaleConfig& config, bool enabled);

  float scale() const { return scale_; }
  void Update(bool overflowed);
  int64_t overflows() const { return overflows_; }
  int32_t clean_steps() const { return clean_; }  // clean steps in a row since the last change
  // Takes the state of a scale kept on a device (LossScaleUpdate's scale and state, read
  // back), so that this scaler goes on from where the device's is.
  void Restore(float scale, int32_t clean, int64_t overflows);

 private:
  LossScaleConfig config_;
  bool enabled_ = false;
  float scale_ = 1.0f;
  int32_t clean_ = 0;
  int64_t overflows_ = 0;
};

}  // namespace tally
