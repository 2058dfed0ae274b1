// The per-row arithmetic of softmax cross-entropy (with label smoothing) and of top-k
// accuracy, the formulas of ops/cpu/loss.cc, shared by the CUDA kernels (ops/cuda/loss.cu)
// and their CPU test (tests/ops/cuda_host_math_test.cc). Plain C++ on the host, so g++ can
// include it.
//
// A row's kernel reduces three numbers over its K logits x: the maximum m, the sum of
// exp(x_j - m) and the sum of x_j. With the target t = (1 - s) * onehot(y) + s / K:
//   loss      = -sum_j t_j (x_j - lse) = lse - (1 - s) x_y - (s / K) sum_j x_j
//   dloss/dx_j = softmax_j - t_j = exp(x_j - lse) - t_j,   lse = m + log(sum_j exp(x_j - m))
// Taking exp about the maximum keeps every term in (0, 1], so nothing overflows.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace tally {
namespace cuda {

TALLY_HOST_DEVICE inline bool LabelInRange(int32_t label, int64_t classes) {
  return label >= 0 && label < classes;
}

// In double: the row's loss is a difference of terms that may be large (logits of 1000 with
// a loss of 1), and it is cheap, once per row.
TALLY_HOST_DEVICE inline double LogSumExp(float max, float sum_exp) {
  return static_cast<double>(max) + log(static_cast<double>(sum_exp));
}

TALLY_HOST_DEVICE inline double SmoothedCrossEntropy(double lse, float x_label, float sum_x,
                                                     float smoothing, int64_t classes) {
  return lse - (1.0 - smoothing) * x_label -
         static_cast<double>(smoothing) / static_cast<double>(classes) * sum_x;
}

TALLY_HOST_DEVICE inline float SmoothedTarget(bool is_label, float smoothing, int64_t classes) {
  return smoothing / static_cast<float>(classes) + (is_label ? 1.0f - smoothing : 0.0f);
}

// (softmax_j - t_j) * grad_scale, from x_j - m and log(sum_j exp(x_j - m)). Not from
// x_j - lse in fp32: lse is as large as the logits, and its rounding to fp32 (6e-8 of it)
// would be an absolute error in the exponent, 6e-5 for logits near 1000.
TALLY_HOST_DEVICE inline float CrossEntropyGradient(float shifted, float log_sum_exp,
                                                    float target, float grad_scale) {
  return (expf(shifted - log_sum_exp) - target) * grad_scale;
}

// Whether class j ranks ahead of the label y: it beats or ties it (ties count against, as on
// the CPU). A row is correct at k when fewer than k classes rank ahead of its label.
TALLY_HOST_DEVICE inline bool RanksAhead(int64_t j, int32_t label, float x_j, float x_label) {
  return j != label && x_j >= x_label;
}

}  // namespace cuda
}  // namespace tally
