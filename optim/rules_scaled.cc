// Signum (and signSGD), LARS and LAMB: the rules whose step is a sign or is scaled by norms
// of the whole key (MXNet 1.9.1: signum_update/signsgd_update, LARS with multi_lars and
// sgd_mom_update, lamb_update_phase1/phase2), and the rule table.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/sgd_rule.h"
#include "optim/rules.h"

namespace tally {
namespace {

inline float Clip(float g, float c) { return g < -c ? -c : (g > c ? c : g); }
inline float Sign(float v) { return static_cast<float>((v > 0) - (v < 0)); }

// Elements per block of SumSquares: each block is summed by one thread, in one order.
constexpr int64_t kNormBlock = 16384;

}  // namespace

Rule RuleOf(const std::string& type) {
  static const std::pair<const char*, Rule> kRules[] = {
      {"sgd", Rule::kSgd},         {"nag", Rule::kNag},         {"adam", Rule::kAdam},
      {"adamw", Rule::kAdamW},     {"adagrad", Rule::kAdagrad}, {"rmsprop", Rule::kRmsProp},
      {"signum", Rule::kSignum},   {"lars", Rule::kLars},       {"lamb", Rule::kLamb}};
  for (const auto& r : kRules) {
    if (type == r.first) return r.second;
  }
  return Rule::kUnknown;
}

StateLayout LayoutOf(const OptimizerConfig& c) {
  StateLayout l;
  switch (RuleOf(c.type)) {
    case Rule::kSgd:
    case Rule::kNag:
    case Rule::kSignum:
      l.arrays = c.momentum > 0 ? 1 : 0;
      break;
    case Rule::kLars:
      l.arrays = c.momentum > 0 ? 1 : 0;
      l.last_lr = c.momentum > 0 && c.momentum_correction;
      break;
    case Rule::kAdam:
    case Rule::kLamb:
      l.arrays = 2;
      l.count = true;
      break;
    case Rule::kAdamW:
      l.arrays = 2;
      break;
    case Rule::kAdagrad:
      l.arrays = 1;
      break;
    case Rule::kRmsProp:
      l.arrays = c.centered ? 3 : 1;
      break;
    case Rule::kUnknown:
      break;
  }
  return l;
}

double SumSquares(const float* v, int64_t n) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(n))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kNormBlock, end = std::min(n, begin + kNormBlock);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += static_cast<double>(v[i]) * v[i];
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

// signum_update with momentum, signsgd_update without: signSGD decays by wd (not wd_lh) and
// ignores clip_gradient, as MXNet's kernel does.
void SignumRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a) {
  float* w = a.w;
  const float* g = a.g;
  const float lr = step.lr, wd = c.wd, rs = step.rescale_grad;
  if (a.s[0] == nullptr) {
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
    for (int64_t i = 0; i < a.n; ++i) w[i] = (1.f - lr * wd) * w[i] - lr * Sign(g[i]);
    return;
  }
  float* mom = a.s[0];
  const float m = c.momentum, clip = c.clip_gradient, wd_lh = c.wd_lh;
  const bool clipped = clip > 0;
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) {
    const float gr = clipped ? Clip(rs * g[i], clip) : rs * g[i];
    mom[i] = m * mom[i] - (1 - m) * wd * w[i] - (1 - m) * gr;
    w[i] = (1.f - lr * wd_lh) * w[i] + lr * Sign(mom[i]);
  }
}

// LARS: the layer's lr is lr * eta * |w| / (|g| * rescale_grad + wd * |w| + eps) when both
// norms are positive (multi_lars; |g| before the clip), then SGD with momentum, the momentum
// scaled by lr / the previous lr when momentum_correction is on and that lr is not 0. A key
// without the trust ratio (MXNet's gamma, beta and bias names) takes the plain lr.
void LarsRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a) {
  const float w_norm = static_cast<float>(step.weight_norm);
  const float g_sum_sq = step.trust_ratio ? static_cast<float>(SumSquares(a.g, a.n)) : 0.0f;
  float lr = step.lr;
  if (step.trust_ratio && w_norm > 0 && g_sum_sq > 0) {
    lr = step.lr * c.eta * w_norm / (std::sqrt(g_sum_sq) * step.rescale_grad + c.wd * w_norm + c.epsilon);
  }
  SgdParams p;
  p.lr = lr;
  p.momentum = c.momentum;
  if (c.momentum_correction && step.last_lr != 0) {
    p.momentum = static_cast<float>(static_cast<double>(c.momentum) * (static_cast<double>(step.lr) / step.last_lr));
  }
  p.wd = c.wd;
  p.rescale_grad = step.rescale_grad;
  p.clip_gradient = c.clip_gradient;
  p.nesterov = false;
  float* w = a.w;
  const float* g = a.g;
  float* mom = a.s[0];
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) SgdUpdateOne(p, g[i], w + i, mom != nullptr ? mom + i : nullptr);
}

// lamb_update_phase1 into scratch (the bias-corrected Adam direction plus wd * w), then
// phase2: w -= lr * r1 / r2 * direction, r1 = |w| within the bounds, r2 = |direction|, the
// plain lr when either is 0.
void LambRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a, float* u) {
  float* w = a.w;
  const float* g = a.g;
  float* mean = a.s[0];
  float* var = a.s[1];
  const float rs = step.rescale_grad, clip = c.clip_gradient, b1 = c.beta1, b2 = c.beta2;
  const float wd = c.wd, eps = c.epsilon;
  const float b1t = static_cast<float>(std::pow(c.beta1, static_cast<double>(step.t)));
  const float b2t = static_cast<float>(std::pow(c.beta2, static_cast<double>(step.t)));
  const bool clipped = clip > 0, bias = c.bias_correction;
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) {
    float gr = g[i] * rs;
    if (clipped) gr = Clip(gr, clip);
    mean[i] = b1 * mean[i] + (1.f - b1) * gr;
    var[i] = b2 * var[i] + (1.f - b2) * gr * gr;
    const float mh = bias ? static_cast<float>(mean[i] / (1. - b1t)) : mean[i];
    const float vh = bias ? var[i] / (1 - b2t) : var[i];
    u[i] = mh / (std::sqrt(vh) + eps) + wd * w[i];
  }
  float r1 = static_cast<float>(std::sqrt(SumSquares(w, a.n)));
  const float r2 = static_cast<float>(std::sqrt(SumSquares(u, a.n)));
  if (c.lower_bound > 0) r1 = std::max(r1, c.lower_bound);
  if (c.upper_bound > 0) r1 = std::min(r1, c.upper_bound);
  const float lr = (r1 == 0.0f || r2 == 0.0f) ? step.lr : step.lr * r1 / r2;
#pragma omp parallel for simd schedule(static) num_threads(cpu::ThreadsFor(a.n))
  for (int64_t i = 0; i < a.n; ++i) w[i] = w[i] - lr * u[i];
}

void ApplyRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a, float* scratch) {
  switch (RuleOf(c.type)) {
    case Rule::kAdam: return AdamRule(c, step, a);
    case Rule::kAdamW: return AdamWRule(c, step, a);
    case Rule::kAdagrad: return AdagradRule(c, step, a);
    case Rule::kRmsProp: return RmsPropRule(c, step, a);
    case Rule::kSignum: return SignumRule(c, step, a);
    case Rule::kLars: return LarsRule(c, step, a);
    case Rule::kLamb: return LambRule(c, step, a, scratch);
    default: LOG(FATAL) << "ApplyRule of optimizer " << c.type;
  }
}

}  // namespace tally
