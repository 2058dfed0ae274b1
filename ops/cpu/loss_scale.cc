// LossScaleUpdate on the host: the rule of ops/loss_scale_rule.h applied to the tensors.
#include "ops/backends.h"
#include "ops/loss_scale_rule.h"
#include "ops/ops.h"

namespace tally {

void cpu::LossScaleUpdate(const LossScaleParams& p, const Tensor& found, Tensor* scale,
                          Tensor* state) {
  int32_t* s = state->data<int32_t>();
  int64_t skipped = s[1];
  LossScaleStep(p, found.data<int32_t>()[0] != 0, scale->data<float>(), &s[0], &skipped);
  s[1] = static_cast<int32_t>(skipped);
}

}  // namespace tally
