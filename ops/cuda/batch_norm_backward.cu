// The backward passes of batch normalisation with the fused add and ReLU (the forward and
// the scheme are described in batch_norm.cu): a reduce kernel (dy masked by y > 0, written
// to dz when asked; per-chunk sums of dy and dy * (x - mean)) -> finalize (dgamma, dbeta and
// the dx coefficients, merged in double in a fixed order) -> dx kernel. With running
// statistics (BatchNormBackwardInference) the same kernels run with the mean-removing terms
// at zero.
#include "ops/cuda/batch_norm_common.cuh"

namespace tally {
namespace cuda {
namespace {

using namespace bn;

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

}  // namespace

void BatchNormAddReluBackward(const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& save_mean,
                              const Tensor& save_inv_std, bool relu, Tensor* dx, Tensor* dz,
                              Tensor* dgamma, Tensor* dbeta) {
  Backward("BatchNormAddReluBackward",
           {&x, &y, &dy, &gamma, &save_mean, &save_inv_std, 0.0f, /*batch_stats=*/true, relu, dx,
            dz, dgamma, dbeta});
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
