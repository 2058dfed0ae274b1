// Execution plans of cuDNN's graph (backend) API for one pass of one convolution, built on
// first use and cached for the life of the process. Internal to ops/cuda/conv2d.cc.
//
//   std::shared_ptr<const ConvPlan> plan = GetConvPlan(key, ctx);
//   Tensor ws = Workspace(device, ConvPlanWorkspaceBytes(*plan));
//   ExecuteConvPlan(*plan, ctx, x, w, y, ws.raw_data());
//
// Tensors are described to cuDNN with dims in its NCHW order and NHWC strides (weights
// KRSC, cuDNN's NHWC filter layout). Every pass names its three tensors by their forward
// roles: x is the input activation (dx for backward-data), w the weights (dw for
// backward-filter), y the output activation (dy for both backward passes).
//
// Thread-safety: every function may be called from any thread. Building a plan and running
// one take the device context's library_mu, since they use its cuDNN handle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ops/cuda/context.h"
#include "ops/cuda/conv2d.h"
#include "base/dtype.h"

namespace tally {
namespace cuda {

// Everything a plan depends on.
struct ConvPlanKey {
  ConvPass pass = ConvPass::kForward;
  DType dtype = DType::kF32;
  int64_t n = 0, h = 0, w = 0, c = 0;  // x: [N, H, W, C]
  int64_t k = 0, r = 0, s = 0;         // w: [K, R, S, C]
  int64_t oh = 0, ow = 0;              // y: [N, OH, OW, K]
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool tf32 = false;  // fp32 only: whether TF32 tensor-core engines may run
  bool deterministic = false;  // skip engines whose results vary from run to run
  int device = 0;
  // Byte alignment (2 to 16) of the pointers of x, w and y: engines that load vectors need
  // it, and a view into a batch may start anywhere.
  int align_x = 16, align_w = 16, align_y = 16;

  bool operator<(const ConvPlanKey& o) const;
};

struct ConvPlan;

// The plan for `key`, built on first use (heuristics, then the first engine config that
// finalizes) and kept. Dies naming the op, shapes and dtype when no engine can run it.
// REQUIRES: ctx is the context of cuda:key.device.
std::shared_ptr<const ConvPlan> GetConvPlan(const ConvPlanKey& key, const DeviceContext& ctx);

size_t ConvPlanWorkspaceBytes(const ConvPlan& plan);
const std::string& ConvPlanEngineName(const ConvPlan& plan);

// Queues the convolution on ctx's stream. x, w, y: device pointers in the roles above.
// REQUIRES: workspace holds ConvPlanWorkspaceBytes(plan) bytes (nullptr when that is 0).
void ExecuteConvPlan(const ConvPlan& plan, const DeviceContext& ctx, void* x, void* w, void* y,
                     void* workspace);

}  // namespace cuda
}  // namespace tally
