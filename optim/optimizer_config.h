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
};
// Fails naming the flag (--optimizer, --lr, --mom, --wd) whose value is out of range.
Status ValidateOptimizerConfig(const OptimizerConfig& c);
// The update rule's settings for config, with the gradients divided by gradient_scale (the
// loss scale they carry).
SgdParams ToSgdParams(const OptimizerConfig& config, float gradient_scale);

}  // namespace tally
