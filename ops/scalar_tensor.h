// Checks of the one- and two-element tensors that carry a step's scalars on the device
// (the "device-resident step results" of ops/ops.h), shared by both backends so that a
// wrong one is refused with the same message on every device. Inline, so that code linking
// only some backend files (the fuzzers' build) needs no further source.
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace tally {

// CHECKs that t is defined, of `dtype` and of `numel` elements, naming the op and the
// argument: "LossScaleUpdate: state int32[1]@cpu:0 must be int32 [2]".
inline void CheckScalarTensor(const char* op, const char* arg, const Tensor& t, DType dtype,
                              int64_t numel) {
  CHECK(t.defined()) << op << ": " << arg << " is required";
  CHECK(t.dtype() == dtype && t.numel() == numel)
      << op << ": " << arg << " " << t.ToString() << " must be " << DTypeName(dtype) << " ["
      << numel << "]";
}

// CheckScalarTensor for each defined tensor of s: lr and grad_scale fp32 [1], found int32 [1].
inline void CheckSgdStepScalars(const char* op, const SgdStepScalars& s) {
  if (s.lr.defined()) CheckScalarTensor(op, "lr", s.lr, DType::kF32, 1);
  if (s.grad_scale.defined()) CheckScalarTensor(op, "grad_scale", s.grad_scale, DType::kF32, 1);
  if (s.found.defined()) CheckScalarTensor(op, "found", s.found, DType::kI32, 1);
}

}  // namespace tally
