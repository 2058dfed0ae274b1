// LossScaleUpdate on the GPU: one thread applies the rule of ops/loss_scale_rule.h to the
// scale and state in device memory, after the NonFiniteFlag that wrote `found` (both on the
// device's stream). Nothing is read back, so a step's loss scale never costs a wait.
#include <cstdint>

#include "ops/backends.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/loss_scale_rule.h"
#include "ops/ops.h"

namespace tally {
namespace cuda {
namespace {

__global__ void LossScaleKernel(LossScaleParams p, const int32_t* found, float* scale,
                                int32_t* state) {
  int64_t skipped = state[1];
  LossScaleStep(p, *found != 0, scale, &state[0], &skipped);
  state[1] = static_cast<int32_t>(skipped);
}

}  // namespace

void LossScaleUpdate(const LossScaleParams& p, const Tensor& found, Tensor* scale,
                     Tensor* state) {
  const DeviceContext& ctx = Context(scale->device());
  LossScaleKernel<<<1, 1, 0, ctx.stream>>>(p, Ptr<int32_t>(found), Ptr<float>(*scale),
                                           Ptr<int32_t>(*state));
  TALLY_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace tally
