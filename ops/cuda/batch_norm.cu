// Batch normalisation, with the fused residual add and ReLU, over the rows of an NHWC
// tensor seen as [M, C] (M = N * H * W), in fp32, fp16 or bf16 with fp32 statistics.
//
// Our own kernels rather than cuDNN's (deprecated in cuDNN 9) so that BN + add + ReLU is one
// pass over the data and the reductions are ours to make deterministic. Every pass is a grid
// of BnPartition blocks (batch_norm_math.cuh): channels across a block's threads, 16 bytes
// per load, rows down.
//
// Training forward: stats kernel (per thread Welford about the first row, per block Chan
// merges in a fixed tree, one partial per chunk of rows and channel) -> finalize (chunks
// merged in double in a fixed order; save_*, running_*, scale and shift) -> apply,
// y = act(x * scale + shift (+ z)).
// Backward: reduce kernel (dy masked by y > 0, written to dz when asked; sums of dy and
// dy * (x - mean)) -> finalize (dgamma, dbeta, dx coefficients) -> dx kernel. No float
// atomics anywhere, so the same inputs give the same bits on every run.
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>

#include "ops/backends.h"
#include "ops/cuda/batch_norm_math.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/vector_math.cuh"

namespace tally {
namespace cuda {
namespace {

// Rows a thread loads before it uses any: four 16-byte loads in flight per thread and
// tensor keep enough bytes moving to cover the latency of HBM.
constexpr int kUnroll = 4;
// Kernels that read three tensors of 8-wide vectors hold half as many rows, so that two
// blocks fit on an SM without spilling (12 loads of 16 bytes are still in flight).
constexpr int Unroll(bool three_tensors, int vec) {
  return three_tensors && vec > 4 ? 2 : kUnroll;
}

struct Dims {
  int64_t rows;
  int channels;
};

Dims CheckDims(const char* op, const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
  const DType t = x.dtype();
  CHECK((t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) &&
        (x.ndim() == 4 || x.ndim() == 2))
      << op << ": x " << x.ToString()
      << " must be float32, float16 or bfloat16 [N,H,W,C] or [N,C]";
  CHECK_LE(x.dim(-1), int64_t{1} << 30)
      << op << ": x " << x.ToString() << " has too many channels";
  Dims d{x.numel() / std::max<int64_t>(x.dim(-1), 1), static_cast<int>(x.dim(-1))};
  for (const Tensor* t : per_channel) {
    CHECK(t->dtype() == DType::kF32 && t->ndim() == 1 && t->dim(0) == d.channels)
        << op << ": per-channel tensor " << t->ToString() << " does not match x "
        << ShapeString(x.shape()) << " with " << d.channels << " channels";
  }
  return d;
}

void CheckLike(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  CHECK(t.dtype() == x.dtype() && t.shape() == x.shape())
      << op << ": " << name << " " << t.ToString() << " must match x " << x.ToString();
}

const float* In(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* Out(Tensor* t) { return static_cast<float*>(t->raw_data()); }
template <typename T> const T* InOrNull(const Tensor* t) { return t ? Ptr<T>(*t) : nullptr; }

dim3 Grid(const BnPartition& p) {
  return dim3(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.chunks));
}
dim3 Block(const BnPartition& p) {
  return dim3(static_cast<unsigned>(p.tx), static_cast<unsigned>(p.ty));
}
dim3 FinalizeGrid(int channels) {
  return dim3(static_cast<unsigned>((channels + kBnFinalizeWidth - 1) / kBnFinalizeWidth));
}
const dim3 kFinalizeBlock(kBnFinalizeWidth, kBnFinalizeDepth);

// The rows [begin, end) of this block's chunk, and this thread's first channel (or -1).
struct BlockRows {
  int64_t begin, end;
  int channel;
};
__device__ inline BlockRows RowsOfBlock(int64_t rows, int channels, int64_t rows_per_chunk,
                                        int vec) {
  BlockRows b;
  b.begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  b.end = min(b.begin + rows_per_chunk, rows);
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * vec;
  b.channel = c < channels ? c : -1;
  return b;
}

// Merges the thread rows of a block in a fixed tree, row ty taking in row ty + half, so that
// the order of every sum is the same on every run. put(slot) stores a thread's state at its
// slot of shared memory; take(other) merges the state at slot `other` into the thread's.
template <typename Put, typename Take>
__device__ inline void TreeOverRows(Put put, Take take) {
  const int ty = threadIdx.y, slot = ty * blockDim.x + threadIdx.x;
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    if (ty < 2 * half) put(slot);
    __syncthreads();
    if (ty < half) take(slot + half * blockDim.x);
    __syncthreads();
  }
}

// ---- forward ----

// One partial (mean, m2) of x - x0 per chunk of rows and channel: [chunks, C] each; x0
// (the first row) into x0_out.
template <typename T, int V>
__global__ void __launch_bounds__(kBnThreads, 2)
    StatsKernel(const T* x, int64_t rows, int channels, int64_t rows_per_chunk, float* part_mean,
                float* part_m2, float* x0_out) {
  __shared__ float s_n[kBnThreads];
  __shared__ float s_mean[kBnThreads * V];
  __shared__ float s_m2[kBnThreads * V];
  const BlockRows b = RowsOfBlock(rows, channels, rows_per_chunk, V);
  const int ty = threadIdx.y, rows_down = blockDim.y;
  float n = 0.0f, mean[V], m2[V], x0[V];
#pragma unroll
  for (int k = 0; k < V; ++k) mean[k] = m2[k] = x0[k] = 0.0f;
  if (b.channel >= 0) {
    const T* base = x + b.channel;
    // Statistics of x - x0, x0 the first row: the deviations keep their digits when the
    // mean is far from zero (as in the CPU op).
    const Pack<T, V> first = LoadPack<T, V>(base);
#pragma unroll
    for (int k = 0; k < V; ++k) x0[k] = Load(first.v[k]);
    if (blockIdx.y == 0 && ty == 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) x0_out[b.channel + k] = x0[k];
    }
    for (int64_t r = b.begin + ty; r < b.end; r += kUnroll * rows_down) {
      Pack<T, V> p[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t row = r + u * rows_down;
        if (row < b.end) p[u] = LoadPack<T, V>(base + row * channels);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (r + u * rows_down >= b.end) break;
        n += 1.0f;
        const float inv_n = 1.0f / n;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          WelfordAdd(Load(p[u].v[k]) - x0[k], inv_n, &mean[k], &m2[k]);
        }
      }
    }
  }
  TreeOverRows(
      [&](int slot) {
        s_n[slot] = n;
#pragma unroll
        for (int k = 0; k < V; ++k) s_mean[slot * V + k] = mean[k], s_m2[slot * V + k] = m2[k];
      },
      [&](int other) {
        const float nb = s_n[other];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          WelfordMerge(n, nb, &mean[k], &m2[k], s_mean[other * V + k], s_m2[other * V + k]);
        }
        n += nb;
      });
  if (ty == 0 && b.channel >= 0) {
    const int64_t at = static_cast<int64_t>(blockIdx.y) * channels + b.channel;
#pragma unroll
    for (int k = 0; k < V; ++k) part_mean[at + k] = mean[k], part_m2[at + k] = m2[k];
  }
}

// Per channel: the chunks' partials merged in double (lane ty takes chunks ty, ty + depth, ...,
// then a tree over the lanes), then save_*, running_* and the apply pass's scale and shift.
__global__ void __launch_bounds__(kBnFinalizeWidth * kBnFinalizeDepth)
    ForwardFinalizeKernel(const float* part_mean, const float* part_m2, const float* x0,
                          int64_t rows, int channels, int64_t chunks, int64_t rows_per_chunk,
                          const float* gamma, const float* beta, float eps, float momentum,
                          float* running_mean, float* running_var, float* save_mean,
                          float* save_inv_std, float* scale, float* shift) {
  __shared__ double s_n[kBnFinalizeDepth * kBnFinalizeWidth];
  __shared__ double s_mean[kBnFinalizeDepth * kBnFinalizeWidth];
  __shared__ double s_m2[kBnFinalizeDepth * kBnFinalizeWidth];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kBnFinalizeWidth + tx;
  double n = 0.0, mean = 0.0, m2 = 0.0;
  if (c < channels) {
#pragma unroll 4
    for (int64_t q = ty; q < chunks; q += kBnFinalizeDepth) {
      const double nb = static_cast<double>(ChunkRows(rows, rows_per_chunk, q));
      const int64_t at = q * channels + c;
      WelfordMerge<double>(n, nb, &mean, &m2, part_mean[at], part_m2[at]);
      n += nb;
    }
  }
  TreeOverRows([&](int slot) { s_n[slot] = n, s_mean[slot] = mean, s_m2[slot] = m2; },
               [&](int other) {
                 WelfordMerge<double>(n, s_n[other], &mean, &m2, s_mean[other], s_m2[other]);
                 n += s_n[other];
               });
  if (ty != 0 || c >= channels) return;
  const BnForwardChannel r = BnTrainingChannel(n, x0[c] + mean, m2, eps, momentum, gamma[c],
                                               beta[c], running_mean[c], running_var[c]);
  save_mean[c] = r.save_mean;
  save_inv_std[c] = r.save_inv_std;
  running_mean[c] = r.running_mean;
  running_var[c] = r.running_var;
  scale[c] = r.scale;
  shift[c] = r.shift;
}

__global__ void InferenceScaleShiftKernel(const float* gamma, const float* beta,
                                          const float* running_mean, const float* running_var,
                                          float eps, int channels, float* scale, float* shift) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  BnInferenceScaleShift(gamma[c], beta[c], running_mean[c], running_var[c], eps, &scale[c],
                        &shift[c]);
}

// y = act(x * scale + shift (+ z)). Each element is read before the same thread writes it,
// so y may be x or z.
template <typename T, int V, bool kAdd, bool kRelu>
__global__ void __launch_bounds__(kBnThreads, 2)
    ApplyKernel(const T* x, const T* z, const float* scale, const float* shift, int64_t rows,
                int channels, int64_t rows_per_chunk, T* y) {
  const BlockRows b = RowsOfBlock(rows, channels, rows_per_chunk, V);
  if (b.channel < 0) return;
  float sc[V], sh[V];
#pragma unroll
  for (int k = 0; k < V; ++k) sc[k] = scale[b.channel + k], sh[k] = shift[b.channel + k];
  const int rows_down = blockDim.y;
  for (int64_t r = b.begin + threadIdx.y; r < b.end; r += kUnroll * rows_down) {
    Pack<T, V> px[kUnroll], pz[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = r + u * rows_down;
      if (row >= b.end) break;
      px[u] = LoadPack<T, V>(x + row * channels + b.channel);
      if (kAdd) pz[u] = LoadPack<T, V>(z + row * channels + b.channel);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = r + u * rows_down;
      if (row >= b.end) break;
      Pack<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float zv = kAdd ? Load(pz[u].v[k]) : 0.0f;
        Store(&out.v[k], BnAddRelu(Load(px[u].v[k]), sc[k], sh[k], zv, kRelu));
      }
      StorePack<T, V>(y + row * channels + b.channel, out);
    }
  }
}

template <typename T, int V>
void LaunchApply(const BnPartition& p, const T* x, const T* z, const float* scale,
                 const float* shift, bool relu, Dims d, T* y, cudaStream_t stream) {
  const auto add = relu ? ApplyKernel<T, V, true, true> : ApplyKernel<T, V, true, false>;
  const auto no_add = relu ? ApplyKernel<T, V, false, true> : ApplyKernel<T, V, false, false>;
  const auto kernel = z != nullptr ? add : no_add;
  kernel<<<Grid(p), Block(p), 0, stream>>>(x, z, scale, shift, d.rows, d.channels,
                                           p.rows_per_chunk, y);
  TALLY_LAUNCH_CHECK();
}

// ---- backward ----

// One partial (sum of dy', sum of dy' * (x - mean)) per chunk and channel, where dy' is dy
// masked by y > 0 when kRelu; dy' goes to dz when dz is not null (dz may be dy).
template <typename T, int V, bool kRelu>
__global__ void __launch_bounds__(kBnThreads, 2)
    BackwardReduceKernel(const T* x, const T* y, const T* dy, const float* mean, int64_t rows,
                         int channels, int64_t rows_per_chunk, T* dz, float* part_dy,
                         float* part_dy_xc) {
  __shared__ float s_dy[kBnThreads * V];
  __shared__ float s_dy_xc[kBnThreads * V];
  constexpr int kRows = Unroll(kRelu, V);
  const BlockRows b = RowsOfBlock(rows, channels, rows_per_chunk, V);
  const int ty = threadIdx.y, rows_down = blockDim.y;
  float sum_dy[V], sum_dy_xc[V], mu[V];
#pragma unroll
  for (int k = 0; k < V; ++k) sum_dy[k] = sum_dy_xc[k] = mu[k] = 0.0f;
  if (b.channel >= 0) {
#pragma unroll
    for (int k = 0; k < V; ++k) mu[k] = mean[b.channel + k];
    for (int64_t r = b.begin + ty; r < b.end; r += kRows * rows_down) {
      Pack<T, V> px[kRows], pg[kRows], py[kRows];
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        const int64_t row = r + u * rows_down;
        if (row >= b.end) break;
        const int64_t at = row * channels + b.channel;
        px[u] = LoadPack<T, V>(x + at);
        pg[u] = LoadPack<T, V>(dy + at);
        if (kRelu) py[u] = LoadPack<T, V>(y + at);
      }
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        const int64_t row = r + u * rows_down;
        if (row >= b.end) break;
        if (kRelu) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            if (!(Load(py[u].v[k]) > 0.0f)) Store(&pg[u].v[k], 0.0f);
          }
        }
        if (dz != nullptr) StorePack<T, V>(dz + row * channels + b.channel, pg[u]);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float g = Load(pg[u].v[k]);
          sum_dy[k] += g;
          sum_dy_xc[k] += g * (Load(px[u].v[k]) - mu[k]);
        }
      }
    }
  }
  TreeOverRows(
      [&](int slot) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          s_dy[slot * V + k] = sum_dy[k];
          s_dy_xc[slot * V + k] = sum_dy_xc[k];
        }
      },
      [&](int other) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          sum_dy[k] += s_dy[other * V + k];
          sum_dy_xc[k] += s_dy_xc[other * V + k];
        }
      });
  if (ty == 0 && b.channel >= 0) {
    const int64_t at = static_cast<int64_t>(blockIdx.y) * channels + b.channel;
#pragma unroll
    for (int k = 0; k < V; ++k) part_dy[at + k] = sum_dy[k], part_dy_xc[at + k] = sum_dy_xc[k];
  }
}

// Per channel: the chunks' sums added in double in a fixed order, then dgamma, dbeta and the
// coefficients a, b, k of dx ([3, C] in coef). stat is save_inv_std with batch statistics,
// the running variance without.
__global__ void __launch_bounds__(kBnFinalizeWidth * kBnFinalizeDepth)
    BackwardFinalizeKernel(const float* part_dy, const float* part_dy_xc, int64_t rows,
                           int channels, int64_t chunks, const float* gamma, const float* stat,
                           float eps, bool batch_stats, float* dgamma, float* dbeta, float* coef) {
  __shared__ double s_dy[kBnFinalizeDepth * kBnFinalizeWidth];
  __shared__ double s_dy_xc[kBnFinalizeDepth * kBnFinalizeWidth];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kBnFinalizeWidth + tx;
  double sum_dy = 0.0, sum_dy_xc = 0.0;
  if (c < channels) {
#pragma unroll 4
    for (int64_t q = ty; q < chunks; q += kBnFinalizeDepth) {
      sum_dy += part_dy[q * channels + c];
      sum_dy_xc += part_dy_xc[q * channels + c];
    }
  }
  TreeOverRows([&](int slot) { s_dy[slot] = sum_dy, s_dy_xc[slot] = sum_dy_xc; },
               [&](int other) { sum_dy += s_dy[other], sum_dy_xc += s_dy_xc[other]; });
  if (ty != 0 || c >= channels) return;
  const double inv_std = batch_stats ? static_cast<double>(stat[c]) : BnInvStd(stat[c], eps);
  const BnBackwardChannel r = BnBackwardCoefficients(sum_dy, sum_dy_xc, static_cast<double>(rows),
                                                     gamma[c], inv_std, batch_stats);
  dgamma[c] = r.dgamma;
  dbeta[c] = r.dbeta;
  coef[c] = r.a;
  coef[channels + c] = r.b;
  coef[2 * channels + c] = r.k;
}

// dx = a * dy' + b * (x - mean) + k, dy' being grad masked by y > 0 when kMask. dx may be
// x, grad or y: each element is read before the same thread writes it.
template <typename T, int V, bool kMask>
__global__ void __launch_bounds__(kBnThreads, 2)
    BackwardDataKernel(const T* x, const T* grad, const T* y, const float* mean, const float* coef,
                       int64_t rows, int channels, int64_t rows_per_chunk, T* dx) {
  constexpr int kRows = Unroll(kMask, V);
  const BlockRows b = RowsOfBlock(rows, channels, rows_per_chunk, V);
  if (b.channel < 0) return;
  float ca[V], cb[V], ck[V], mu[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int c = b.channel + k;
    ca[k] = coef[c], cb[k] = coef[channels + c], ck[k] = coef[2 * channels + c], mu[k] = mean[c];
  }
  const int rows_down = blockDim.y;
  for (int64_t r = b.begin + threadIdx.y; r < b.end; r += kRows * rows_down) {
    Pack<T, V> px[kRows], pg[kRows], py[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t row = r + u * rows_down;
      if (row >= b.end) break;
      const int64_t at = row * channels + b.channel;
      px[u] = LoadPack<T, V>(x + at);
      pg[u] = LoadPack<T, V>(grad + at);
      if (kMask) py[u] = LoadPack<T, V>(y + at);
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t row = r + u * rows_down;
      if (row >= b.end) break;
      Pack<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float g = Load(pg[u].v[k]);
        if (kMask && !(Load(py[u].v[k]) > 0.0f)) g = 0.0f;
        Store(&out.v[k], BnBackwardDx(g, Load(px[u].v[k]), mu[k], ca[k], cb[k], ck[k]));
      }
      StorePack<T, V>(dx + row * channels + b.channel, out);
    }
  }
}

// ---- drivers ----

template <typename T, int V>
void ForwardTrainingT(const DeviceContext& ctx, const Tensor& x, const Tensor* z,
                      const Tensor& gamma, const Tensor& beta, const BatchNormParams& p, bool relu,
                      Dims d, Tensor* running_mean, Tensor* running_var, Tensor* y,
                      Tensor* save_mean, Tensor* save_inv_std) {
  const BnPartition part = PartitionRows(d.rows, d.channels, V);
  const int64_t per_chunk = part.chunks * d.channels;
  Tensor ws = Workspace(x.device(), sizeof(float) * (2 * per_chunk + 3 * d.channels));
  float* part_mean = static_cast<float*>(ws.raw_data());
  float* part_m2 = part_mean + per_chunk;
  float* x0 = part_m2 + per_chunk;
  float* scale = x0 + d.channels;
  float* shift = scale + d.channels;
  StatsKernel<T, V><<<Grid(part), Block(part), 0, ctx.stream>>>(
      Ptr<T>(x), d.rows, d.channels, part.rows_per_chunk, part_mean, part_m2, x0);
  TALLY_LAUNCH_CHECK();
  ForwardFinalizeKernel<<<FinalizeGrid(d.channels), kFinalizeBlock, 0, ctx.stream>>>(
      part_mean, part_m2, x0, d.rows, d.channels, part.chunks, part.rows_per_chunk, In(gamma),
      In(beta), p.eps, p.momentum, Out(running_mean), Out(running_var), Out(save_mean),
      Out(save_inv_std), scale, shift);
  TALLY_LAUNCH_CHECK();
  LaunchApply<T, V>(part, Ptr<T>(x), InOrNull<T>(z), scale, shift, relu, d, Ptr<T>(*y),
                    ctx.stream);
}

template <typename T, int V>
void ForwardInferenceT(const DeviceContext& ctx, const Tensor& x, const Tensor* z,
                       const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, const BatchNormParams& p, bool relu, Dims d,
                       Tensor* y) {
  const BnPartition part = PartitionRows(d.rows, d.channels, V);
  Tensor ws = Workspace(x.device(), sizeof(float) * 2 * d.channels);
  float* scale = static_cast<float*>(ws.raw_data());
  float* shift = scale + d.channels;
  InferenceScaleShiftKernel<<<(d.channels + 255) / 256, 256, 0, ctx.stream>>>(
      In(gamma), In(beta), In(running_mean), In(running_var), p.eps, d.channels, scale, shift);
  TALLY_LAUNCH_CHECK();
  LaunchApply<T, V>(part, Ptr<T>(x), InOrNull<T>(z), scale, shift, relu, d, Ptr<T>(*y),
                    ctx.stream);
}

// The backward passes of both forms. y (for the ReLU mask) is used only when relu;
// `stat` is save_inv_std with batch statistics, running_var without.
struct BackwardArgs {
  const Tensor* x;
  const Tensor* y;
  const Tensor* dy;
  const Tensor* gamma;
  const Tensor* mean;
  const Tensor* stat;
  float eps;
  bool batch_stats, relu;
  Tensor *dx, *dz, *dgamma, *dbeta;
};

template <typename T, int V>
void BackwardT(const DeviceContext& ctx, const BackwardArgs& a, Dims d) {
  const BnPartition part = PartitionRows(d.rows, d.channels, V);
  const int64_t per_chunk = part.chunks * d.channels;
  Tensor ws = Workspace(a.x->device(), sizeof(float) * (2 * per_chunk + 3 * d.channels));
  float* part_dy = static_cast<float*>(ws.raw_data());
  float* part_dy_xc = part_dy + per_chunk;
  float* coef = part_dy_xc + per_chunk;
  const T* x = Ptr<T>(*a.x);
  const T* y = a.relu ? Ptr<T>(*a.y) : nullptr;
  const T* dy = Ptr<T>(*a.dy);
  T* dz = a.dz != nullptr ? Ptr<T>(*a.dz) : nullptr;
  const float* mean = In(*a.mean);
  const int64_t rpc = part.rows_per_chunk;
  const auto reduce =
      a.relu ? BackwardReduceKernel<T, V, true> : BackwardReduceKernel<T, V, false>;
  reduce<<<Grid(part), Block(part), 0, ctx.stream>>>(x, y, dy, mean, d.rows, d.channels, rpc, dz,
                                                     part_dy, part_dy_xc);
  TALLY_LAUNCH_CHECK();
  BackwardFinalizeKernel<<<FinalizeGrid(d.channels), kFinalizeBlock, 0, ctx.stream>>>(
      part_dy, part_dy_xc, d.rows, d.channels, part.chunks, In(*a.gamma), In(*a.stat), a.eps,
      a.batch_stats, Out(a.dgamma), Out(a.dbeta), coef);
  TALLY_LAUNCH_CHECK();
  // dz already holds the masked gradient: reading it saves reading both dy and y.
  const bool mask = a.relu && dz == nullptr;
  const auto data = mask ? BackwardDataKernel<T, V, true> : BackwardDataKernel<T, V, false>;
  data<<<Grid(part), Block(part), 0, ctx.stream>>>(x, a.relu && !mask ? dz : dy, y, mean, coef,
                                                   d.rows, d.channels, rpc, Ptr<T>(*a.dx));
  TALLY_LAUNCH_CHECK();
}

void Backward(const char* op, const BackwardArgs& a) {
  const Dims d = CheckDims(op, *a.x, {a.gamma, a.mean, a.stat, a.dgamma, a.dbeta});
  CheckLike(op, "dy", *a.dy, *a.x);
  CheckLike(op, "dx", *a.dx, *a.x);
  if (a.relu) CheckLike(op, "y", *a.y, *a.x);
  if (a.dz != nullptr) CheckLike(op, "dz", *a.dz, *a.x);
  if (d.channels == 0) return;
  const DeviceContext& ctx = Context(a.x->device());
  if (d.rows == 0) {  // empty sums
    TALLY_CUDA_CHECK(cudaMemsetAsync(a.dgamma->raw_data(), 0, a.dgamma->nbytes(), ctx.stream));
    TALLY_CUDA_CHECK(cudaMemsetAsync(a.dbeta->raw_data(), 0, a.dbeta->nbytes(), ctx.stream));
    return;
  }
  TALLY_DISPATCH_FLOAT(a.x->dtype(), op, T, {
    const bool vec = VectorAligned<T, kVec16<T>>(
        d.channels, {a.x->raw_data(), a.dy->raw_data(), a.dx->raw_data(),
                     a.relu ? a.y->raw_data() : nullptr, a.dz ? a.dz->raw_data() : nullptr});
    if (vec) {
      BackwardT<T, kVec16<T>>(ctx, a, d);
    } else {
      BackwardT<T, 1>(ctx, a, d);
    }
  });
}

void ForwardTraining(const char* op, const Tensor& x, const Tensor* z, const Tensor& gamma,
                     const Tensor& beta, const BatchNormParams& p, bool relu,
                     Tensor* running_mean, Tensor* running_var, Tensor* y, Tensor* save_mean,
                     Tensor* save_inv_std) {
  const Dims d =
      CheckDims(op, x, {&gamma, &beta, running_mean, running_var, save_mean, save_inv_std});
  CheckLike(op, "y", *y, x);
  if (z != nullptr) CheckLike(op, "z", *z, x);
  CHECK_GT(d.rows, 0) << op << ": empty batch " << ShapeString(x.shape());
  const DeviceContext& ctx = Context(x.device());
  TALLY_DISPATCH_FLOAT(x.dtype(), op, T, {
    if (VectorAligned<T, kVec16<T>>(d.channels,
                                    {x.raw_data(), y->raw_data(), z ? z->raw_data() : nullptr})) {
      ForwardTrainingT<T, kVec16<T>>(ctx, x, z, gamma, beta, p, relu, d, running_mean,
                                     running_var, y, save_mean, save_inv_std);
    } else {
      ForwardTrainingT<T, 1>(ctx, x, z, gamma, beta, p, relu, d, running_mean, running_var, y,
                             save_mean, save_inv_std);
    }
  });
}

void ForwardInference(const char* op, const Tensor& x, const Tensor* z, const Tensor& gamma,
                      const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                      const BatchNormParams& p, bool relu, Tensor* y) {
  const Dims d = CheckDims(op, x, {&gamma, &beta, &running_mean, &running_var});
  CheckLike(op, "y", *y, x);
  if (z != nullptr) CheckLike(op, "z", *z, x);
  if (d.rows == 0 || d.channels == 0) return;
  const DeviceContext& ctx = Context(x.device());
  TALLY_DISPATCH_FLOAT(x.dtype(), op, T, {
    if (VectorAligned<T, kVec16<T>>(d.channels,
                                    {x.raw_data(), y->raw_data(), z ? z->raw_data() : nullptr})) {
      ForwardInferenceT<T, kVec16<T>>(ctx, x, z, gamma, beta, running_mean, running_var, p, relu,
                                      d, y);
    } else {
      ForwardInferenceT<T, 1>(ctx, x, z, gamma, beta, running_mean, running_var, p, relu, d, y);
    }
  });
}

}  // namespace

void BatchNormAddReluForwardTraining(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                     const Tensor& beta, const BatchNormParams& p, bool relu,
                                     Tensor* running_mean, Tensor* running_var, Tensor* y,
                                     Tensor* save_mean, Tensor* save_inv_std) {
  ForwardTraining("BatchNormAddReluForwardTraining", x, z, gamma, beta, p, relu, running_mean,
                  running_var, y, save_mean, save_inv_std);
}

void BatchNormAddReluForwardInference(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean,
                                      const Tensor& running_var, const BatchNormParams& p,
                                      bool relu, Tensor* y) {
  ForwardInference("BatchNormAddReluForwardInference", x, z, gamma, beta, running_mean,
                   running_var, p, relu, y);
}

void BatchNormAddReluBackward(const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& save_mean,
                              const Tensor& save_inv_std, bool relu, Tensor* dx, Tensor* dz,
                              Tensor* dgamma, Tensor* dbeta) {
  Backward("BatchNormAddReluBackward",
           {&x, &y, &dy, &gamma, &save_mean, &save_inv_std, 0.0f, /*batch_stats=*/true, relu, dx,
            dz, dgamma, dbeta});
}

void BatchNormForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const BatchNormParams& p, Tensor* running_mean, Tensor* running_var,
                              Tensor* y, Tensor* save_mean, Tensor* save_inv_std) {
  ForwardTraining("BatchNormForwardTraining", x, nullptr, gamma, beta, p, /*relu=*/false,
                  running_mean, running_var, y, save_mean, save_inv_std);
}

void BatchNormForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const BatchNormParams& p, Tensor* y) {
  ForwardInference("BatchNormForwardInference", x, nullptr, gamma, beta, running_mean,
                   running_var, p, /*relu=*/false, y);
}

void BatchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                       const Tensor& save_mean, const Tensor& save_inv_std, Tensor* dx,
                       Tensor* dgamma, Tensor* dbeta) {
  Backward("BatchNormBackward", {&x, nullptr, &dy, &gamma, &save_mean, &save_inv_std, 0.0f,
                                 /*batch_stats=*/true, /*relu=*/false, dx, nullptr, dgamma, dbeta});
}

void BatchNormBackwardInference(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                const Tensor& running_mean, const Tensor& running_var,
                                const BatchNormParams& p, Tensor* dx, Tensor* dgamma,
                                Tensor* dbeta) {
  Backward("BatchNormBackwardInference",
           {&x, nullptr, &dy, &gamma, &running_mean, &running_var, p.eps, /*batch_stats=*/false,
            /*relu=*/false, dx, nullptr, dgamma, dbeta});
}

}  // namespace cuda
}  // namespace tally
