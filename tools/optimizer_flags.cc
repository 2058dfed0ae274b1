#include "tools/optimizer_flags.h"

#include <gflags/gflags.h>

DECLARE_string(optimizer);
DECLARE_double(lr);
DECLARE_double(mom);
DECLARE_double(wd);

// Negative means "the optimizer's default" where MXNet's defaults differ between rules.
DEFINE_double(beta1, 0.9, "adam, adamw, lamb: the decay of the gradient's running mean");
DEFINE_double(beta2, 0.999, "adam, adamw, lamb: the decay of the squared gradient's running mean");
DEFINE_double(epsilon, -1, "added to a divisor; -1: the optimizer's (adam, adamw, rmsprop 1e-8; adagrad 1e-7; lamb 1e-6; lars 0)");
DEFINE_double(gamma1, 0.9, "rmsprop: the decay of the squared gradient's running mean");
DEFINE_double(gamma2, 0.9, "rmsprop --centered: the momentum of the step");
DEFINE_bool(centered, false, "rmsprop: Graves' centered variant");
DEFINE_double(clip_weights, -1, "rmsprop: clip the weights to [-v, v] when > 0");
DEFINE_double(eta, -1, "lars: the trust coefficient; adamw: the multiplier of the step; -1: 0.001 (lars), 1 (adamw)");
DEFINE_bool(momentum_correction, true, "lars: scale the momentum by lr / the previous lr when the lr changes");
DEFINE_double(wd_lh, 0, "signum: decoupled weight decay");
DEFINE_double(lower_bound, -1, "lamb: the least weight norm of the trust ratio when > 0");
DEFINE_double(upper_bound, -1, "lamb: the largest weight norm of the trust ratio when > 0");
DEFINE_bool(bias_correction, true, "lamb: correct the running means for their start at 0");
DEFINE_double(clip_gradient, -1, "clip each rescaled gradient value to [-v, v] when > 0");

namespace tally {

Status OptimizerFromFlags(OptimizerConfig* c) {
  c->type = FLAGS_optimizer;
  c->lr = static_cast<float>(FLAGS_lr);
  c->momentum = static_cast<float>(FLAGS_mom);
  c->wd = static_cast<float>(FLAGS_wd);
  c->clip_gradient = static_cast<float>(FLAGS_clip_gradient);
  c->beta1 = static_cast<float>(FLAGS_beta1);
  c->beta2 = static_cast<float>(FLAGS_beta2);
  c->epsilon = static_cast<float>(FLAGS_epsilon);
  c->gamma1 = static_cast<float>(FLAGS_gamma1);
  c->gamma2 = static_cast<float>(FLAGS_gamma2);
  c->centered = FLAGS_centered;
  c->clip_weights = static_cast<float>(FLAGS_clip_weights);
  c->eta = static_cast<float>(FLAGS_eta);
  c->momentum_correction = FLAGS_momentum_correction;
  c->wd_lh = static_cast<float>(FLAGS_wd_lh);
  c->lower_bound = static_cast<float>(FLAGS_lower_bound);
  c->upper_bound = static_cast<float>(FLAGS_upper_bound);
  c->bias_correction = FLAGS_bias_correction;
  return ValidateOptimizerConfig(*c);
}

}  // namespace tally
