// Window geometry of the CUDA pooling kernels (ops/cuda/pooling.cu), in functions that
// compile for the host too, so that tests/ops/cuda_math_test.cc checks them against brute
// force and the CPU ops without a GPU.
//
// The backward passes gather: each input element sums, in the order the CPU op adds them,
// the outputs that reach it, found without atomics:
// - average pooling: the outputs whose windows cover the element (CoveringOutputs);
// - max pooling, which is given only dy and argmax: the output rows whose argmax rows, over
//   every image and channel, include the element's row (an envelope [lo[i], hi[i]] per output
//   row, EnvelopeRange), and likewise for columns. Any output whose argmax is the element
//   lies in those ranges, so the gather finds all of them whatever the window was; argmax from
//   MaxPoolForward keeps the ranges as tight as the windows.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace tally {
namespace cuda {

// floor(a / b) for b > 0 and any sign of a.
TALLY_HOST_DEVICE inline int64_t FloorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The in-bounds part [*lo, *hi) of output position i's window along one axis of length size.
TALLY_HOST_DEVICE inline void PoolWindow(int64_t i, int stride, int pad, int kernel, int64_t size,
                                         int64_t* lo, int64_t* hi) {
  const int64_t start = i * stride - pad;
  *lo = start > 0 ? start : 0;
  *hi = start + kernel < size ? start + kernel : size;
}

// The outputs [*first, *last] along one axis (out_size of them) whose windows hold input
// position h; *first > *last when none does.
TALLY_HOST_DEVICE inline void CoveringOutputs(int64_t h, int stride, int pad, int kernel,
                                              int64_t out_size, int64_t* first, int64_t* last) {
  // i * stride - pad <= h < i * stride - pad + kernel
  const int64_t lo = FloorDiv(h + pad - kernel, stride) + 1;
  const int64_t hi = FloorDiv(h + pad, stride);
  *first = lo > 0 ? lo : 0;
  *last = hi < out_size - 1 ? hi : out_size - 1;
}

// a = *q * d + *r with 0 <= *r < d, for int32 a and d > 0, from a multiply by inv_d = 1.0 / d:
// an integer division costs some twenty instructions on a GPU, and the max-pool backward
// splits every argmax. The double product is within one of the quotient; one step corrects it.
TALLY_HOST_DEVICE inline void DivMod(int32_t a, int32_t d, double inv_d, int32_t* q, int32_t* r) {
  int64_t qq = static_cast<int64_t>(floor(static_cast<double>(a) * inv_d));
  int64_t rr = a - qq * d;
  if (rr < 0) {
    --qq;
    rr += d;
  } else if (rr >= d) {
    ++qq;
    rr -= d;
  }
  *q = static_cast<int32_t>(qq);
  *r = static_cast<int32_t>(rr);
}

// The outputs [*first, *last] of the n along one axis whose envelope [lo[i], hi[i]] holds
// position h (*first > *last when none). A linear scan: the envelopes of argmax from
// MaxPoolForward grow with i, but the scan does not rely on it, so any argmax in range is
// gathered completely.
TALLY_HOST_DEVICE inline void EnvelopeRange(int32_t h, const int32_t* lo, const int32_t* hi,
                                            int32_t n, int32_t* first, int32_t* last) {
  *first = n;
  *last = -1;
  for (int32_t i = 0; i < n; ++i) {
    if (lo[i] <= h && h <= hi[i]) {
      if (*first == n) *first = i;
      *last = i;
    }
  }
}

}  // namespace cuda
}  // namespace tally
