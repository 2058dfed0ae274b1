// OptimizerConfig: the optimizer's settings (MXNet's --optimizer, --lr, --mom, --wd and the
// rule's own parameters under MXNet 1.9.1's names), as the user gives them to
// KVStore::SetOptimizer and as SET_OPTIMIZER carries them to the servers; both ends turn
// them into the update rule's parameters here.
//
//   OptimizerConfig opt;
//   opt.type = "adam";
//   opt.lr = 0.001f;
//   TALLY_RETURN_IF_ERROR(ValidateOptimizerConfig(opt));  // names the flag that is wrong
//   const OptimizerConfig resolved = WithDefaults(opt);   // epsilon, eta: the rule's own
//   const int slots = OptimizerStateSlots(resolved);      // 2 means + 1 step count for adam
//
// Plain values: copy them freely, from any thread.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "base/status.h"

namespace tally {

struct OptimizerConfig {
  // sgd, nag, adam, adamw, adagrad, rmsprop, signum, lars or lamb (KnownOptimizers()).
  std::string type = "sgd";
  float lr = 0.1f;
  float momentum = 0.9f;  // sgd, nag, signum, lars
  float wd = 1e-4f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;  // <= 0: no clipping
  bool multi_precision = true;  // keep fp32 master weights for fp16/bf16 values
  // The rules' own parameters, MXNet's names and defaults. A negative epsilon or eta means
  // the rule's default (WithDefaults): the rules differ.
  float beta1 = 0.9f;         // adam, adamw, lamb
  float beta2 = 0.999f;       // adam, adamw, lamb
  float epsilon = -1.0f;      // adam/adamw/rmsprop 1e-8, adagrad 1e-7, lamb 1e-6, lars 0
  float gamma1 = 0.9f;        // rmsprop: the decay of the squared-gradient average
  float gamma2 = 0.9f;        // rmsprop, centered: the momentum of the step
  bool centered = false;      // rmsprop: Graves' variant (rmspropalex)
  float clip_weights = -1.0f;  // rmsprop: < 0: no clipping of the weights
  float eta = -1.0f;          // lars: the trust coefficient (0.001); adamw: the lr multiplier (1)
  bool momentum_correction = true;  // lars: scale the momentum by lr_t / lr_{t-1}
  float wd_lh = 0.0f;         // signum: decoupled weight decay
  float lower_bound = -1.0f;  // lamb: < 0: no lower bound on the weight norm
  float upper_bound = -1.0f;  // lamb: < 0: no upper bound
  bool bias_correction = true;  // lamb
  // adam, lars: MXNet's lazy update applies to row_sparse gradients only; Tally's are dense,
  // so it changes nothing, and is accepted for scripts that pass it.
  bool lazy_update = true;
  // Keys updated without weight decay: MXNet's wd_mult 0, which it gives by parameter name
  // (--wd-exclude bn,bias: batch-norm gamma and beta, and biases). Every other key has wd.
  std::set<int> no_wd_keys;
};
// The weight decay of key under c: c.wd, or 0 for the keys of c.no_wd_keys.
inline float KeyWd(const OptimizerConfig& c, int key) { return c.no_wd_keys.count(key) != 0 ? 0.0f : c.wd; }

// The optimizer names ValidateOptimizerConfig accepts.
const std::vector<std::string>& KnownOptimizers();
// Fails naming the flag (--optimizer, --lr, --mom, --wd, --beta1, ...) whose value is out
// of range.
Status ValidateOptimizerConfig(const OptimizerConfig& c);
// c with epsilon and eta set to the rule's default where they are negative.
OptimizerConfig WithDefaults(OptimizerConfig c);
// How many fp32 arrays of a weight's size make one key's optimizer state, in the order
// Updater::StateSlot numbers them: the rule's per-element arrays (momentum; mean, var; ...),
// then its per-key scalars each repeated over the weight's size (the step count of adam and
// lamb, the previous lr of lars's momentum correction). 0: the rule keeps no state.
int OptimizerStateSlots(const OptimizerConfig& c);
// The update rule's settings for config, with the gradients divided by gradient_scale (the
// loss scale they carry). sgd and nag only.
SgdParams ToSgdParams(const OptimizerConfig& config, float gradient_scale);

}  // namespace tally
