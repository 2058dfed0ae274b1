// Adam, AdamW, AdaGrad and RMSProp (both variants): MXNet 1.9.1's per-element arithmetic in
// its order, in fp32 as its kernels run for fp32 weights. Each loop is split over threads
// in fixed ranges and vectorised by the compiler (no calls but sqrt, no branches that vary
// per element except the clips).
#include <cmath>

#include "ops/cpu/parallel.h"
#include "optim/rules.h"

namespace tally {
namespace {

inline float Clip(float g, float c) { return g < -c ? -c : (g > c ? c : g); }

}  // namespace

// adam_update after Adam.update: lr is already bias-corrected by the Updater,
// lr * sqrt(1 - beta2^t) / (1 - beta1^t). The weight decay joins the gradient before the clip.
void AdamRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a) {
  float* w = a.w;
  const float* g = a.g;
  float* mean = a.s[0];
  float* var = a.s[1];
  const float rs = step.rescale_grad, wd = c.wd, clip = c.clip_gradient, b1 = c.beta1, b2 = c.beta2;
  const float lr = step.lr, eps = c.epsilon;
  const bool clipped = clip > 0;
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) {
    float gr = g[i] * rs + w[i] * wd;
    if (clipped) gr = Clip(gr, clip);
    mean[i] = b1 * mean[i] + (1.f - b1) * gr;
    var[i] = b2 * var[i] + (1.f - b2) * gr * gr;
    w[i] = w[i] - lr * mean[i] / (std::sqrt(var[i]) + eps);
  }
}

// _contrib_adamw_update: no bias correction, the weight decay decoupled from the moments and
// scaled by eta with the step: w -= eta * (lr * mean / (sqrt(var) + epsilon) + wd * w).
void AdamWRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a) {
  float* w = a.w;
  const float* g = a.g;
  float* mean = a.s[0];
  float* var = a.s[1];
  const float rs = step.rescale_grad, wd = c.wd, clip = c.clip_gradient, b1 = c.beta1, b2 = c.beta2;
  const float lr = step.lr, eps = c.epsilon, eta = c.eta;
  const bool clipped = clip > 0;
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) {
    float gr = rs * g[i];
    if (clipped) gr = Clip(gr, clip);
    const float m = mean[i] = b1 * mean[i] + (1.0f - b1) * gr;
    const float v = var[i] = b2 * var[i] + (1.0f - b2) * (gr * gr);
    w[i] = w[i] - eta * (lr * m / (std::sqrt(v) + eps) + wd * w[i]);
  }
}

// AdaGrad.update's dense path: epsilon inside the square root, the weight decay outside the
// history.
void AdagradRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a) {
  float* w = a.w;
  const float* g = a.g;
  float* history = a.s[0];
  const float rs = step.rescale_grad, wd = c.wd, clip = c.clip_gradient, lr = step.lr, eps = c.epsilon;
  const bool clipped = clip > 0;
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) {
    float gr = g[i] * rs;
    if (clipped) gr = Clip(gr, clip);
    history[i] += gr * gr;
    const float div = gr / std::sqrt(history[i] + eps);
    w[i] += (div + w[i] * wd) * -lr;
  }
}

// rmsprop_update (Tieleman & Hinton) or, centered, rmspropalex_update (Graves): the weight
// decay joins the gradient before the clip; clip_weights > 0 clips the new weight.
void RmsPropRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a) {
  float* w = a.w;
  const float* g = a.g;
  float* sn = a.s[0];
  const float rs = step.rescale_grad, wd = c.wd, clip = c.clip_gradient, lr = step.lr, eps = c.epsilon;
  const float g1 = c.gamma1, g2 = c.gamma2, cw = c.clip_weights;
  const bool clipped = clip > 0, clip_w = cw > 0;
  if (!c.centered) {
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
    for (int64_t i = 0; i < a.n; ++i) {
      float gr = rs * g[i] + wd * w[i];
      if (clipped) gr = Clip(gr, clip);
      sn[i] = (1.f - g1) * (gr * gr) + g1 * sn[i];
      float nw = w[i] - lr * (gr / std::sqrt(sn[i] + eps));
      if (clip_w) nw = Clip(nw, cw);
      w[i] = nw;
    }
    return;
  }
  float* sg = a.s[1];
  float* delta = a.s[2];
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) {
    float gr = rs * g[i] + wd * w[i];
    if (clipped) gr = Clip(gr, clip);
    sn[i] = (1.f - g1) * gr * gr + g1 * sn[i];
    sg[i] = (1.f - g1) * gr + g1 * sg[i];
    delta[i] = g2 * delta[i] - (lr * gr / std::sqrt(sn[i] - sg[i] * sg[i] + eps));
    float nw = w[i] + delta[i];
    if (clip_w) nw = Clip(nw, cw);
    w[i] = nw;
  }
}

}  // namespace tally
