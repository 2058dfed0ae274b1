// The update rules beyond SGD and NAG, as MXNet 1.9.1 applies them (its optimizer.py and
// the kernels of src/operator/optimizer_op-inl.h and contrib/adamw-inl.h), over flat fp32
// arrays on the CPU. The Updater (optim/updater.h) owns the arrays and the per-key scalars
// (the step count, the previous lr); this file is the arithmetic.
//
//   RuleStep step;                 // this call's scalars, from the Updater
//   step.lr = lr; step.t = 3; step.rescale_grad = 1.0f / loss_scale;
//   RuleArrays a{weight32, grad32, {mean, var}, n};
//   ApplyRule(WithDefaults(config), step, a);   // weight32, mean and var updated in place
//
// Each rule is elementwise, split over OpenMP threads in fixed contiguous ranges; the
// norms LARS and LAMB need are sums over fixed blocks added in block order, so the result
// is the same bit for bit whatever the thread count (servers and their replicas agree).
#pragma once

#include <cstdint>
#include <string>

#include "optim/optimizer_config.h"

namespace tally {

enum class Rule { kUnknown, kSgd, kNag, kAdam, kAdamW, kAdagrad, kRmsProp, kSignum, kLars, kLamb };
Rule RuleOf(const std::string& type);

// What one key's state holds (OptimizerStateSlots counts it).
struct StateLayout {
  int arrays = 0;        // fp32 arrays of the weight's size, each zeros at first
  bool count = false;    // the number of updates applied (adam's and lamb's bias correction)
  bool last_lr = false;  // the lr of the key's previous update (lars's momentum correction)
};
StateLayout LayoutOf(const OptimizerConfig& c);

// One update's scalars.
struct RuleStep {
  float lr = 0;            // the scheduled lr of this update
  float rescale_grad = 1;  // the config's, divided by the loss scale the gradient carries
  int64_t t = 1;           // 1 + the updates applied before this one
  float last_lr = 0;       // lars: the lr of the previous update (0: none)
  double weight_norm = 0;  // lars: the L2 norm of the weight as stored (fp16 under multi-precision)
  bool trust_ratio = true;  // lars: scale the lr by the norms (false: a gamma, beta or bias key)
};

// The arrays of one update: w the fp32 weight (or fp32 master), g the raw fp32 gradient,
// s the state arrays in LayoutOf order, all of n elements.
struct RuleArrays {
  float* w = nullptr;
  const float* g = nullptr;
  float* s[3] = {nullptr, nullptr, nullptr};
  int64_t n = 0;
};

// Applies one update of c's rule (c after WithDefaults; not sgd or nag). scratch: n floats
// lamb may use.
void ApplyRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a, float* scratch);

// The sum of squares of n fp32 values, in double, block by block in a fixed order.
double SumSquares(const float* v, int64_t n);

// The rules, one per MXNet kernel (rules_adaptive.cc, rules_scaled.cc).
void AdamRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a);
void AdamWRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a);
void AdagradRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a);
void RmsPropRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a);
void SignumRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a);
void LarsRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a);
void LambRule(const OptimizerConfig& c, const RuleStep& step, const RuleArrays& a, float* scratch);

}  // namespace tally
