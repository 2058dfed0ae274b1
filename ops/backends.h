// The two backends of ops/ops.h: tally::cpu (ops/cpu/) and tally::cuda (ops/cuda/), each
// with the signatures of ops/op_signatures.inc. Only ops/ops.cc (the dispatcher), the
// backends themselves and tests comparing them include this header. A build without CUDA
// declares the cuda functions but defines and references none of them.
#pragma once

#include "ops/ops.h"

namespace tally {
namespace cpu {
#include "ops/op_signatures.inc"
}  // namespace cpu
namespace cuda {
#include "ops/op_signatures.inc"
}  // namespace cuda
}  // namespace tally
