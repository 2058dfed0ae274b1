// The arithmetic of the CUDA batch norm (ops/cuda/batch_norm.cu) in functions that compile
// for the host too, so that tests/ops/cuda_math_test.cc holds it to the CPU op
// (ops/cpu/batch_norm.cc) on machines without a GPU: how the rows are split among blocks,
// Welford's running statistics and Chan's merge of two of them, and the per-channel
// coefficients of the forward and backward passes.
//
// The per-channel formulas run in double, as the CPU op's do, so that the two backends
// differ only in how they sum.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace tally {
namespace cuda {

// ---- how an [M, C] tensor is split among blocks ----

constexpr int kBnThreads = 256;  // threads per block of every row-tiled kernel
// A few waves of blocks on 132 SMs, so that the last wave's tail is short.
constexpr int64_t kBnTargetBlocks = 1024;
// Fewer rows per thread and a block's fixed costs (row 0, the tree) stop being small.
constexpr int64_t kBnMinRowsPerThread = 16;
// The finalize kernels merge the chunks' partials of kBnFinalizeWidth channels per block:
// lane l of a channel takes chunks l, l + depth, ... in order, then the lanes meet in a tree.
constexpr int kBnFinalizeWidth = 32;
constexpr int kBnFinalizeDepth = 16;

// A block's threads are tx vectors of `vec` consecutive channels across (a warp reads whole
// lines of one row, or several consecutive rows when C is narrow) and ty rows down. Blocks
// tile the channels `tiles` ways and split the rows into `chunks` runs of rows_per_chunk;
// thread row r of a block takes rows r, r + ty, r + 2 ty, ... of its run. The split depends
// on the shape and vector width only, not on the GPU's number of SMs, so the order of every
// sum, and with it the result, does not either.
struct BnPartition {
  int vec = 1, tx = 1, ty = 1, tiles = 1;
  int64_t chunks = 1, rows_per_chunk = 1;
};

inline BnPartition PartitionRows(int64_t rows, int64_t channels, int vec) {
  BnPartition p;
  p.vec = vec;
  const int64_t vectors = channels / vec;
  while (p.tx < 32 && p.tx < vectors) p.tx *= 2;
  p.ty = kBnThreads / p.tx;
  p.tiles = static_cast<int>((vectors + p.tx - 1) / p.tx);
  const int64_t by_blocks = (kBnTargetBlocks + p.tiles - 1) / p.tiles;
  const int64_t by_rows = std::max<int64_t>(1, rows / (p.ty * kBnMinRowsPerThread));
  const int64_t chunks = std::max<int64_t>(1, std::min(by_blocks, by_rows));
  p.rows_per_chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  p.chunks = std::max<int64_t>(1, (rows + p.rows_per_chunk - 1) / p.rows_per_chunk);
  return p;
}

// Rows in chunk q (every chunk has at least one when rows > 0).
TALLY_HOST_DEVICE inline int64_t ChunkRows(int64_t rows, int64_t rows_per_chunk, int64_t q) {
  const int64_t left = rows - q * rows_per_chunk;
  return left < rows_per_chunk ? left : rows_per_chunk;
}

// ---- statistics ----

// Welford: x becomes the n-th value (inv_n = 1 / n) of a running mean and sum of squared
// deviations m2. No difference of large sums anywhere, so a mean far from zero costs nothing.
TALLY_HOST_DEVICE inline void WelfordAdd(float x, float inv_n, float* mean, float* m2) {
  const float d = x - *mean;
  *mean += d * inv_n;
  *m2 += d * (x - *mean);
}

// Chan, Golub and LeVeque: merges the statistics of nb values (mean_b, m2_b) into those of
// na values (*mean, *m2). The caller adds the counts, which are shared by the channels of
// one thread. Stable: the cross term comes from the difference of the two means.
template <typename F>
TALLY_HOST_DEVICE inline void WelfordMerge(F na, F nb, F* mean, F* m2, F mean_b, F m2_b) {
  if (nb == F(0)) return;
  const F wb = nb / (na + nb);
  const F delta = mean_b - *mean;
  *mean += delta * wb;
  *m2 += m2_b + delta * delta * na * wb;
}

// ---- forward ----

// What the training forward writes for one channel, from its batch statistics (count
// values, their mean and m2), and the scale and shift of y = x * scale + shift. The kernels
// gather the statistics of x - x0, x0 the channel's first value, so that a mean far from
// zero does not cost the deviations their digits; mean is x0 plus theirs.
struct BnForwardChannel {
  float save_mean, save_inv_std, running_mean, running_var, scale, shift;
};

TALLY_HOST_DEVICE inline BnForwardChannel BnTrainingChannel(double count, double mean, double m2,
                                                            float eps, float momentum, float gamma,
                                                            float beta, float running_mean,
                                                            float running_var) {
  const double var = m2 > 0.0 ? m2 / count : 0.0;  // biased, for the normalisation
  const double inv_std = 1.0 / sqrt(var + static_cast<double>(eps));
  const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
  const double mom = momentum;
  BnForwardChannel r;
  r.save_mean = static_cast<float>(mean);
  r.save_inv_std = static_cast<float>(inv_std);
  r.running_mean = static_cast<float>(mom * running_mean + (1.0 - mom) * mean);
  r.running_var = static_cast<float>(mom * running_var + (1.0 - mom) * unbiased);
  r.scale = static_cast<float>(gamma * inv_std);
  r.shift = static_cast<float>(beta - mean * gamma * inv_std);
  return r;
}

// 1 / sqrt(var + eps) of the running variance, for the inference passes.
TALLY_HOST_DEVICE inline double BnInvStd(float var, float eps) {
  return 1.0 / sqrt(static_cast<double>(var) + static_cast<double>(eps));
}

// Scale and shift of the inference forward, from the running statistics.
TALLY_HOST_DEVICE inline void BnInferenceScaleShift(float gamma, float beta, float running_mean,
                                                    float running_var, float eps, float* scale,
                                                    float* shift) {
  const double inv_std = BnInvStd(running_var, eps);
  *scale = static_cast<float>(gamma * inv_std);
  *shift = static_cast<float>(beta - running_mean * gamma * inv_std);
}

// y of the fused op for one element, before rounding to the activation dtype.
TALLY_HOST_DEVICE inline float BnAddRelu(float x, float scale, float shift, float z, bool relu) {
  const float v = x * scale + shift + z;
  return relu ? (v > 0.0f ? v : 0.0f) : v;
}

// ---- backward ----

// The gradient of one channel: dgamma, dbeta, and dx = a * dy + b * (x - mean) + k.
// With batch statistics (training): dx = gamma * inv_std * (dy - mean(dy) - xhat *
// mean(dy * xhat)), xhat = (x - mean) * inv_std. With running statistics (inference) the
// mean and variance are constants: b = k = 0.
struct BnBackwardChannel {
  float dgamma, dbeta, a, b, k;
};

// sum_dy and sum_dy_xc are the sums over the count rows of dy and dy * (x - mean).
TALLY_HOST_DEVICE inline BnBackwardChannel BnBackwardCoefficients(double sum_dy, double sum_dy_xc,
                                                                  double count, float gamma,
                                                                  double inv_std,
                                                                  bool batch_stats) {
  const double g = gamma;
  const double dg = sum_dy_xc * inv_std;
  BnBackwardChannel r;
  r.dgamma = static_cast<float>(dg);
  r.dbeta = static_cast<float>(sum_dy);
  r.a = static_cast<float>(g * inv_std);
  r.b = batch_stats ? static_cast<float>(-g * inv_std * inv_std * dg / count) : 0.0f;
  r.k = batch_stats ? static_cast<float>(-g * inv_std * sum_dy / count) : 0.0f;
  return r;
}

TALLY_HOST_DEVICE inline float BnBackwardDx(float dy, float x, float mean, float a, float b,
                                            float k) {
  return a * dy + b * (x - mean) + k;
}

}  // namespace cuda
}  // namespace tally
