// MXNet's SGD and NAG rule for one element, shared by the CPU loops (ops/cpu/optimizer.cc)
// and the CUDA kernels (ops/cuda/optimizer.cu), so that both apply the same arithmetic in
// the same order. See SgdParams in ops/ops.h for the formulas.
#pragma once

#include "ops/host_device.h"
#include "ops/ops.h"

namespace tally {

// Updates *w (and *mom when mom is not null) from the raw gradient g.
TALLY_HOST_DEVICE inline void SgdUpdateOne(const SgdParams& p, float g, float* w, float* mom) {
  g *= p.rescale_grad;
  if (p.clip_gradient > 0.0f) g = g < -p.clip_gradient ? -p.clip_gradient : (g > p.clip_gradient ? p.clip_gradient : g);
  if (p.nesterov) {
    const float gw = g + p.wd * *w;
    if (mom != nullptr) {
      *mom = p.momentum * *mom + gw;
      *w -= p.lr * (gw + p.momentum * *mom);
    } else {
      *w -= p.lr * gw;
    }
  } else if (mom != nullptr) {
    *mom = p.momentum * *mom - p.lr * (g + p.wd * *w);
    *w += *mom;
  } else {
    *w -= p.lr * (g + p.wd * *w);
  }
}

// The step's parameters once MultiSgdUpdate's device-held scalars (SgdStepScalars) are
// read: lr, when not null, replaces p.lr; grad_scale, when not null, divides rescale_grad.
// A slot then takes lr * lr_mult, as without them. The CPU op and the CUDA kernel both call
// this, so the two compute the same fp32 quotient.
TALLY_HOST_DEVICE inline SgdParams WithStepScalars(SgdParams p, const float* lr,
                                                   const float* grad_scale) {
  if (lr != nullptr) p.lr = *lr;
  if (grad_scale != nullptr) p.rescale_grad = p.rescale_grad / *grad_scale;
  return p;
}

}  // namespace tally
