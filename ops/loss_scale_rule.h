// The dynamic loss scale's rule for one step, shared by the host's LossScaler
// (worker/loss_scaler.cc), the CPU op LossScaleUpdate (ops/cpu/loss_scale.cc) and its CUDA
// kernel (ops/cuda/loss_scale.cu), so that a scale kept on the device follows the host's
// exactly. Plain C++ on the host, so g++ can include it.
#pragma once

#include <cstdint>

#include "ops/host_device.h"
#include "ops/ops.h"

namespace tally {

// One step: a step that found inf or NaN counts in *skipped and, when enabled, halves *scale
// (not below p.min) and restarts *clean; a clean step, when enabled, counts in *clean and the
// window's last one doubles *scale (not above p.max) and restarts *clean. Disabled, only
// *skipped changes. Halving and doubling are exact in fp32, so every caller gets the same bits.
TALLY_HOST_DEVICE inline void LossScaleStep(const LossScaleParams& p, bool found, float* scale,
                                            int32_t* clean, int64_t* skipped) {
  if (found) ++*skipped;
  if (!p.enabled) return;
  if (found) {
    const float half = *scale * 0.5f;
    *scale = half < p.min ? p.min : half;
    *clean = 0;
    return;
  }
  if (++*clean >= p.window) {
    const float twice = *scale * 2.0f;
    *scale = p.max < twice ? p.max : twice;
    *clean = 0;
  }
}

}  // namespace tally
