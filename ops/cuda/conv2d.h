// Introspection of the cuDNN convolutions behind ops/cuda/conv2d.cc, for tests and
// benchmarks that need to know which engine cuDNN runs for a convolution.
//
//   std::string e = cuda::Conv2dEngineName(cuda::ConvPass::kForward, {32, 56, 56, 64},
//                                          {64, 3, 3, 64}, {1, 1, 1, 1}, DType::kF16, dev);
//   // "eng12 k2=3 k3=0 [tensor_core]"
//
// Thread-safe. Include only in builds with CUDA (TALLY_HAVE_CUDA).
#pragma once

#include <string>

#include "ops/ops.h"

namespace tally {
namespace cuda {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// The engine config that runs `pass` of the convolution of an x of shape `x` with weights
// of shape `w` in `dtype` on `device`: "eng<global index>", its knob choices as
// k<type>=<value>, its numerical notes in brackets, and " (fallback)" when cuDNN's
// performance heuristics offered nothing usable. Builds and caches the plan if needed,
// under the current AllowTf32() and for 16-byte-aligned tensors (fresh allocations).
// REQUIRES: device is a CUDA device that exists; dtype is kF32, kF16 or kBF16.
std::string Conv2dEngineName(ConvPass pass, const Shape& x, const Shape& w, const ConvParams& p,
                             DType dtype, const Device& device);

}  // namespace cuda
}  // namespace tally
