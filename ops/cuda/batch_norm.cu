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
// The backward passes are in batch_norm_backward.cu. No float atomics anywhere, so the same
// inputs give the same bits on every run.
#include "ops/cuda/batch_norm_common.cuh"

namespace tally {
namespace cuda {
namespace {

using namespace bn;

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

}  // namespace cuda
}  // namespace tally
