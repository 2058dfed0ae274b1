#include "optim/optimizer_config.h"

#include <cmath>

#include "optim/rules.h"

namespace tally {
namespace {

bool In01(float v) { return v >= 0 && v < 1; }

// Checks the parameters of the rules other than sgd and nag.
Status ValidateRuleParameters(const OptimizerConfig& c) {
  if (!In01(c.beta1)) return Status::InvalidArgument("--beta1 must be in [0, 1)");
  if (!In01(c.beta2)) return Status::InvalidArgument("--beta2 must be in [0, 1)");
  if (!(c.epsilon >= 0 || c.epsilon == -1.0f)) {
    return Status::InvalidArgument("--epsilon must be >= 0 (or -1: the optimizer's default)");
  }
  if (!In01(c.gamma1)) return Status::InvalidArgument("--gamma1 must be in [0, 1)");
  if (!In01(c.gamma2)) return Status::InvalidArgument("--gamma2 must be in [0, 1)");
  if (!(c.eta > 0 || c.eta == -1.0f)) return Status::InvalidArgument("--eta must be > 0 (or -1: the optimizer's default)");
  if (!(c.wd_lh >= 0)) return Status::InvalidArgument("--wd-lh must be >= 0");
  if (std::isnan(c.clip_weights)) return Status::InvalidArgument("--clip-weights must be a number (< 0: off)");
  if (std::isnan(c.lower_bound)) return Status::InvalidArgument("--lower-bound must be a number (< 0: off)");
  if (std::isnan(c.upper_bound)) return Status::InvalidArgument("--upper-bound must be a number (< 0: off)");
  if (c.lower_bound >= 0 && c.upper_bound >= 0 && c.lower_bound > c.upper_bound) {
    return Status::InvalidArgument("--lower-bound must not exceed --upper-bound");
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& KnownOptimizers() {
  static const std::vector<std::string> names = {"sgd",     "nag",    "adam", "adamw", "adagrad",
                                                 "rmsprop", "signum", "lars", "lamb"};
  return names;
}

Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (RuleOf(c.type) == Rule::kUnknown) {
    std::string names;
    for (const std::string& n : KnownOptimizers()) names += (names.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("--optimizer '" + c.type + "' is not supported (" + names + ")");
  }
  if (!(c.lr >= 0) || std::isinf(c.lr)) return Status::InvalidArgument("--lr must be >= 0");
  if (!In01(c.momentum)) return Status::InvalidArgument("--mom must be in [0, 1)");
  if (!(c.wd >= 0) || std::isinf(c.wd)) return Status::InvalidArgument("--wd must be >= 0");
  if (!(c.rescale_grad > 0) || std::isinf(c.rescale_grad)) {
    return Status::InvalidArgument("--rescale-grad must be > 0");
  }
  if (std::isnan(c.clip_gradient)) return Status::InvalidArgument("--clip-gradient must be a number (<= 0: off)");
  return ValidateRuleParameters(c);
}

OptimizerConfig WithDefaults(OptimizerConfig c) {
  const Rule r = RuleOf(c.type);
  if (c.epsilon < 0) {
    c.epsilon = r == Rule::kAdagrad ? 1e-7f : r == Rule::kLamb ? 1e-6f : r == Rule::kLars ? 0.0f : 1e-8f;
  }
  if (c.eta < 0) c.eta = r == Rule::kLars ? 0.001f : 1.0f;
  return c;
}

int OptimizerStateSlots(const OptimizerConfig& c) {
  const StateLayout l = LayoutOf(c);
  return l.arrays + (l.count ? 1 : 0) + (l.last_lr ? 1 : 0);
}

SgdParams ToSgdParams(const OptimizerConfig& config, float gradient_scale) {
  SgdParams p;
  p.lr = config.lr;
  p.momentum = config.momentum;
  p.wd = config.wd;
  p.rescale_grad = config.rescale_grad / gradient_scale;
  p.clip_gradient = config.clip_gradient;
  p.nesterov = config.type == "nag";
  return p;
}

}  // namespace tally
