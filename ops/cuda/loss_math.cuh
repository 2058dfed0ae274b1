// The per-row arithmetic of softmax cross-entropy (with label smoothing) and of top-k
// accuracy, the formulas of ops/cpu/loss.cc, shared by the CUDA kernels (ops/cuda/loss.cu)
// and their CPU test (tests/ops/cuda_host_math_test.cc). Plain C++ on the host, so g++ can
// include it.
//
// A row's kernel reduces three numbers over its K logits x: the maximum m, the sum of
// exp(x_j - m) and the sum of x_j. With MXNet's smoothed target (smooth_alpha s): t_y = 1 - s
// and t_j = u = s / (K - 1) for j != y (u = 0 when K = 1),
//   loss      = -sum_j t_j (x_j - lse) = lse - (1 - s - u) x_y - u sum_j x_j
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

// u above: the target of a class that is not the label.
TALLY_HOST_DEVICE inline double OffLabelTarget(float smoothing, int64_t classes) {
  return classes > 1 ? static_cast<double>(smoothing) / static_cast<double>(classes - 1) : 0.0;
}

TALLY_HOST_DEVICE inline double SmoothedCrossEntropy(double lse, float x_label, float sum_x,
                                                     float smoothing, int64_t classes) {
  const double off = OffLabelTarget(smoothing, classes);
  return lse - (1.0 - smoothing - off) * x_label - off * sum_x;
}

TALLY_HOST_DEVICE inline float SmoothedTarget(bool is_label, float smoothing, int64_t classes) {
  // In fp32, as the gradient is: this runs once per logit.
  if (is_label) return 1.0f - smoothing;
  return classes > 1 ? smoothing / static_cast<float>(classes - 1) : 0.0f;
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
