// OptimizerConfig: the optimizer's settings (MXNet's --optimizer, --lr, --mom, --wd, ...), as
// the user gives them to KVStore::SetOptimizer and as SET_OPTIMIZER carries them to the
// servers; both ends turn them into the update rule's parameters here.
//
//   OptimizerConfig opt;
//   opt.type = "nag";
//   opt.lr = 0.05f;
//   TALLY_RETURN_IF_ERROR(ValidateOptimizerConfig(opt));  // names the flag that is wrong
//   const SgdParams p = ToSgdParams(opt, /*gradient_scale=*/loss_scale);
//
// Plain values: copy them freely, from any thread.
#pragma once

#include <set>
#include <string>

#include "ops/ops.h"
#include "base/status.h"

namespace tally {

struct OptimizerConfig {
  std::string type = "sgd";  // "sgd" or "nag"
  float lr = 0.1f;
  float momentum = 0.9f;
  float wd = 1e-4f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;  // <= 0: no clipping
  bool multi_precision = true;  // keep fp32 master weights for fp16/bf16 values
  // Keys updated without weight decay: MXNet's wd_mult 0, which it gives by parameter name
  // (--wd-exclude bn,bias: batch-norm gamma and beta, and biases). Every other key has wd.
  std::set<int> no_wd_keys;
};
// The weight decay of key under c: c.wd, or 0 for the keys of c.no_wd_keys.
inline float KeyWd(const OptimizerConfig& c, int key) { return c.no_wd_keys.count(key) != 0 ? 0.0f : c.wd; }
// Fails naming the flag (--optimizer, --lr, --mom, --wd) whose value is out of range.
Status ValidateOptimizerConfig(const OptimizerConfig& c);
// The update rule's settings for config, with the gradients divided by gradient_scale (the
// loss scale they carry).
SgdParams ToSgdParams(const OptimizerConfig& config, float gradient_scale);

}  // namespace tally
