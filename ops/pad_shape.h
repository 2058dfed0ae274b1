// The shape rule shared by the CPU and CUDA PadLastDim / CropLastDim (ops/ops.h).
#pragma once

#include "base/tensor.h"

namespace tally {

struct LastDimCopy {
  int64_t rows = 0;   // product of the leading dimensions
  int64_t narrow = 0; // the smaller last dimension
  int64_t wide = 0;   // the larger one
};

// CHECKs that `small` and `large` have one dtype and device, and equal shapes but for a last
// dimension of `large` at least as big; names `op` otherwise.
inline LastDimCopy CheckLastDimCopy(const char* op, const Tensor& small, const Tensor& large) {
  bool ok = small.dtype() == large.dtype() && small.ndim() == large.ndim() && small.ndim() >= 1 &&
            small.device() == large.device();
  for (int i = 0; ok && i + 1 < small.ndim(); ++i) ok = small.dim(i) == large.dim(i);
  ok = ok && small.dim(-1) <= large.dim(-1);
  CHECK(ok) << op << ": " << small.ToString() << " and " << large.ToString()
            << " must differ only in a last dimension that is wider in the second";
  LastDimCopy c;
  c.narrow = small.dim(-1);
  c.wide = large.dim(-1);
  c.rows = 1;
  for (int i = 0; i + 1 < small.ndim(); ++i) c.rows *= small.dim(i);
  return c;
}

}  // namespace tally
