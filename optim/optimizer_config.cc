#include "optim/optimizer_config.h"

namespace tally {

Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (c.type != "sgd" && c.type != "nag") {
    return Status::InvalidArgument("--optimizer '" + c.type + "' is not supported (sgd or nag)");
  }
  if (!(c.lr >= 0)) return Status::InvalidArgument("--lr must be >= 0");
  if (!(c.momentum >= 0 && c.momentum < 1)) return Status::InvalidArgument("--mom must be in [0, 1)");
  if (!(c.wd >= 0)) return Status::InvalidArgument("--wd must be >= 0");
  return Status::Ok();
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
