// Introspection of the oneDNN convolutions behind ops/cpu/conv2d.cc, for tests and
// benchmarks that check which implementation runs (a jit kernel, not a reference loop).
#pragma once

#include <string>

#include "ops/ops.h"

namespace tally {
namespace cpu {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// oneDNN's implementation name (e.g. "jit:avx512_core") for the convolution of an x of
// shape `x` with weights of shape `w`, creating and caching its primitive if needed.
std::string Conv2dImplementation(const Shape& x, const Shape& w, const ConvParams& p,
                                 ConvPass pass);

}  // namespace cpu
}  // namespace tally
