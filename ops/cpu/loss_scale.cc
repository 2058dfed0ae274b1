// LossScaleUpdate on the host: the rule of ops/loss_scale_rule.h applied to the tensors.
#include "ops/backends.h"
#include "ops/loss_scale_rule.h"
#include "ops/ops.h"
#include "ops/scalar_tensor.h"

namespace tally {

void cpu::LossScaleUpdate(const LossScaleParams& p, const Tensor& found, Tensor* scale,
                          Tensor* state) {
  const char* op = "LossScaleUpdate";
  CHECK(scale != nullptr && state != nullptr) << op << ": scale and state are required";
  CheckScalarTensor(op, "found", found, DType::kI32, 1);
  CheckScalarTensor(op, "scale", *scale, DType::kF32, 1);
  CheckScalarTensor(op, "state", *state, DType::kI32, 2);
  int32_t* s = state->data<int32_t>();
  int64_t skipped = s[1];
  LossScaleStep(p, found.data<int32_t>()[0] != 0, scale->data<float>(), &s[0], &skipped);
  s[1] = static_cast<int32_t>(skipped);
}

}  // namespace tally
