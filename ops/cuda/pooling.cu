// Max, average and global average pooling on NHWC tensors, fp32, fp16 or bf16.
//
// Forward passes: a block per output row (n, i), a thread per output vector of V channels,
// so that a warp reads consecutive channels of each tap. Backward passes gather instead of
// scattering: a block per input row, a thread per input vector, summing in fp32 the outputs
// that reach it in the order the CPU op adds them (raster order of the outputs). No atomics
// on floats, so results are deterministic, and max pooling's fp32 gradient equals the CPU
// op's bit for bit. MaxPoolBackward is given only dy and argmax, not the window: it finds
// the outputs that reach an input from the argmax itself (pooling_math.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "ops/backends.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/pooling_math.cuh"
#include "ops/cuda/vector_math.cuh"

namespace tally {
namespace cuda {
namespace {

// Channels per thread: 16 bytes of argmax, 8 or 16 bytes of data.
constexpr int kVec = 4;
constexpr int kThreads = 256;
// MaxPoolBackward keeps per-column extremes of a block in shared memory (8 bytes a column).
constexpr int kMaxEnvelopeColumns = 6144;

struct PoolDims {
  int64_t n;
  int h, w, c, oh, ow;
};

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// x: [N, H, W, C], y: [N, OH, OW, C]; extents, rows and grids small enough for int32
// arithmetic (argmax is int32 anyway).
PoolDims Dims(const char* op, const Shape& x, const Shape& y) {
  for (int k = 1; k < 4; ++k) {
    CHECK(x[k] < INT_MAX && y[k] < INT_MAX) << op << ": x " << ShapeString(x) << " or y "
                                            << ShapeString(y) << " too large";
  }
  CHECK(x[1] * x[2] < INT_MAX && x[2] * x[3] < INT_MAX && y[2] * y[3] < INT_MAX &&
        x[0] * std::max(x[1], y[1]) < INT_MAX)
      << op << ": x " << ShapeString(x) << " or y " << ShapeString(y) << " too large";
  return {x[0], static_cast<int>(x[1]), static_cast<int>(x[2]), static_cast<int>(x[3]),
          static_cast<int>(y[1]), static_cast<int>(y[2])};
}

PoolDims CheckPool(const char* op, const Tensor& x, const PoolParams& p, const Tensor& y) {
  CHECK(IsFloat(x.dtype()) && y.dtype() == x.dtype())
      << op << ": x " << x.ToString() << " and y " << y.ToString()
      << " must be float32, float16 or bfloat16 of one dtype";
  const Shape want = PoolOutputShape(x.shape(), p);
  CHECK(y.shape() == want) << op << ": y " << ShapeString(y.shape()) << " for x "
                           << ShapeString(x.shape()) << " should be " << ShapeString(want);
  return Dims(op, x.shape(), y.shape());
}

// Threads for a block that walks a row of `vectors` thread items.
int RowThreads(int64_t vectors) {
  return static_cast<int>(std::min<int64_t>(kThreads, (vectors + 31) / 32 * 32));
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    MaxPoolForwardKernel(const T* x, PoolDims d, PoolParams p, T* y, int32_t* argmax) {
  const int64_t row = blockIdx.x;  // n * OH + i
  const int64_t n = row / d.oh;
  const int i = static_cast<int>(row - n * d.oh);
  int64_t h0, h1;
  PoolWindow(i, p.stride_h, p.pad_h, p.kernel_h, d.h, &h0, &h1);
  const int vectors = d.c / V;
  for (int t = threadIdx.x; t < d.ow * vectors; t += blockDim.x) {
    const int j = t / vectors, c = (t - j * vectors) * V;
    int64_t w0, w1;
    PoolWindow(j, p.stride_w, p.pad_w, p.kernel_w, d.w, &w0, &w1);
    float best[V];
    Pack<int32_t, V> arg;
#pragma unroll
    for (int k = 0; k < V; ++k) best[k] = -INFINITY, arg.v[k] = static_cast<int32_t>(h0 * d.w + w0);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t w = w0; w < w1; ++w) {
        const Pack<T, V> v = LoadPack<T, V>(x + ((n * d.h + h) * d.w + w) * d.c + c);
        const int32_t flat = static_cast<int32_t>(h * d.w + w);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float f = Load(v.v[k]);
          if (f > best[k]) best[k] = f, arg.v[k] = flat;  // the first of equal maxima wins
        }
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) Store(&out.v[k], best[k]);
    const int64_t at = (row * d.ow + j) * d.c + c;
    StorePack<T, V>(y + at, out);
    StorePack<int32_t, V>(argmax + at, arg);
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    AvgPoolForwardKernel(const T* x, PoolDims d, PoolParams p, T* y) {
  const int64_t row = blockIdx.x;
  const int64_t n = row / d.oh;
  const int i = static_cast<int>(row - n * d.oh);
  int64_t h0, h1;
  PoolWindow(i, p.stride_h, p.pad_h, p.kernel_h, d.h, &h0, &h1);
  const int vectors = d.c / V;
  for (int t = threadIdx.x; t < d.ow * vectors; t += blockDim.x) {
    const int j = t / vectors, c = (t - j * vectors) * V;
    int64_t w0, w1;
    PoolWindow(j, p.stride_w, p.pad_w, p.kernel_w, d.w, &w0, &w1);
    float sum[V] = {};
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t w = w0; w < w1; ++w) {
        const Pack<T, V> v = LoadPack<T, V>(x + ((n * d.h + h) * d.w + w) * d.c + c);
#pragma unroll
        for (int k = 0; k < V; ++k) sum[k] += Load(v.v[k]);
      }
    }
    const float inv = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) Store(&out.v[k], sum[k] * inv);
    StorePack<T, V>(y + (row * d.ow + j) * d.c + c, out);
  }
}

// dx of one input vector: dy of every output whose window covers it, over its window size.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    AvgPoolBackwardKernel(const T* dy, PoolDims d, PoolParams p, T* dx) {
  const int64_t row = blockIdx.x;  // n * H + h
  const int64_t n = row / d.h;
  const int h = static_cast<int>(row - n * d.h);
  int64_t i0, i1;
  CoveringOutputs(h, p.stride_h, p.pad_h, p.kernel_h, d.oh, &i0, &i1);
  const int vectors = d.c / V;
  for (int t = threadIdx.x; t < d.w * vectors; t += blockDim.x) {
    const int w = t / vectors, c = (t - w * vectors) * V;
    int64_t j0, j1;
    CoveringOutputs(w, p.stride_w, p.pad_w, p.kernel_w, d.ow, &j0, &j1);
    float sum[V] = {};
    for (int64_t i = i0; i <= i1; ++i) {
      int64_t h0, h1;
      PoolWindow(i, p.stride_h, p.pad_h, p.kernel_h, d.h, &h0, &h1);
      for (int64_t j = j0; j <= j1; ++j) {
        int64_t w0, w1;
        PoolWindow(j, p.stride_w, p.pad_w, p.kernel_w, d.w, &w0, &w1);
        const float inv = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
        const Pack<T, V> g = LoadPack<T, V>(dy + ((n * d.oh + i) * d.ow + j) * d.c + c);
#pragma unroll
        for (int k = 0; k < V; ++k) sum[k] += Load(g.v[k]) * inv;
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) Store(&out.v[k], sum[k]);
    StorePack<T, V>(dx + (row * d.w + w) * d.c + c, out);
  }
}

// ---- MaxPoolBackward ----

// The envelopes of pooling_math.cuh over the argmax of output row i = blockIdx.x of a group
// of images: the extreme input rows into h_lo[i], h_hi[i], and per output column j the
// extreme input columns into w_lo[j], w_hi[j]. Integer minima and maxima do not depend on
// the order of the atomics.
__global__ void __launch_bounds__(kThreads)
    MaxPoolEnvelopeKernel(const int32_t* argmax, PoolDims d, int images_per_block, double inv_w,
                          int32_t* h_lo, int32_t* h_hi, int32_t* w_lo, int32_t* w_hi) {
  extern __shared__ int32_t s_cols[];  // [ow] minima, then [ow] maxima
  __shared__ int32_t s_flat[2][kThreads / 32];
  int32_t* s_lo = s_cols;
  int32_t* s_hi = s_cols + d.ow;
  for (int j = threadIdx.x; j < d.ow; j += blockDim.x) s_lo[j] = INT_MAX, s_hi[j] = INT_MIN;
  __syncthreads();
  const int i = blockIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * images_per_block;
  const int64_t images = min(n0 + images_per_block, d.n) - n0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  // Flat indices grow with their row, so the row extremes follow from the flat ones.
  int32_t flat_lo = INT_MAX, flat_hi = INT_MIN;
  for (int64_t q = warp; q < images * d.ow; q += warps) {  // (image, column) per warp
    const int64_t n = n0 + q / d.ow;
    const int j = static_cast<int>(q % d.ow);
    const int32_t* a = argmax + ((n * d.oh + i) * d.ow + j) * d.c;
    int32_t lo = INT_MAX, hi = INT_MIN;
    for (int c = lane; c < d.c; c += 32) {
      const int32_t v = a[c];
      int32_t row, col;
      DivMod(v, d.w, inv_w, &row, &col);
      flat_lo = min(flat_lo, v), flat_hi = max(flat_hi, v);
      lo = min(lo, col), hi = max(hi, col);
    }
    for (int off = 16; off > 0; off /= 2) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, off));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, off));
    }
    if (lane == 0 && lo <= hi) atomicMin(&s_lo[j], lo), atomicMax(&s_hi[j], hi);
  }
  for (int off = 16; off > 0; off /= 2) {
    flat_lo = min(flat_lo, __shfl_xor_sync(0xffffffffu, flat_lo, off));
    flat_hi = max(flat_hi, __shfl_xor_sync(0xffffffffu, flat_hi, off));
  }
  if (lane == 0) s_flat[0][warp] = flat_lo, s_flat[1][warp] = flat_hi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < warps; ++k) {
      flat_lo = min(flat_lo, s_flat[0][k]), flat_hi = max(flat_hi, s_flat[1][k]);
    }
    if (flat_lo <= flat_hi) {
      int32_t row_lo, row_hi, unused;
      DivMod(flat_lo, d.w, inv_w, &row_lo, &unused);
      DivMod(flat_hi, d.w, inv_w, &row_hi, &unused);
      atomicMin(&h_lo[i], row_lo);
      atomicMax(&h_hi[i], row_hi);
    }
  }
  for (int j = threadIdx.x; j < d.ow; j += blockDim.x) {
    if (s_lo[j] <= s_hi[j]) atomicMin(&w_lo[j], s_lo[j]), atomicMax(&w_hi[j], s_hi[j]);
  }
}

// For each input row (t < h) and column (t - h < w): the outputs whose envelopes hold it.
__global__ void MaxPoolRangesKernel(const int32_t* h_lo, const int32_t* h_hi, const int32_t* w_lo,
                                    const int32_t* w_hi, PoolDims d, int32_t* i_first,
                                    int32_t* i_last, int32_t* j_first, int32_t* j_last) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < d.h) {
    EnvelopeRange(t, h_lo, h_hi, d.oh, &i_first[t], &i_last[t]);
  } else if (t < d.h + d.w) {
    EnvelopeRange(t - d.h, w_lo, w_hi, d.ow, &j_first[t - d.h], &j_last[t - d.h]);
  }
}

// dx of one input vector: the dy of every output in its ranges whose argmax is this input,
// in raster order, as the CPU op adds them.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    MaxPoolGatherKernel(const T* dy, const int32_t* argmax, PoolDims d, const int32_t* i_first,
                        const int32_t* i_last, const int32_t* j_first, const int32_t* j_last,
                        T* dx) {
  const int64_t row = blockIdx.x;  // n * H + h
  const int64_t n = row / d.h;
  const int h = static_cast<int>(row - n * d.h);
  const int i0 = i_first[h], i1 = i_last[h];
  const int vectors = d.c / V;
  for (int t = threadIdx.x; t < d.w * vectors; t += blockDim.x) {
    const int w = t / vectors, c = (t - w * vectors) * V;
    const int j0 = j_first[w], j1 = j_last[w];
    const int32_t target = h * d.w + w;
    float sum[V] = {};
    for (int i = i0; i <= i1; ++i) {
      for (int j = j0; j <= j1; ++j) {
        const int64_t at = ((n * d.oh + i) * d.ow + j) * d.c + c;
        const Pack<int32_t, V> a = LoadPack<int32_t, V>(argmax + at);
        const Pack<T, V> g = LoadPack<T, V>(dy + at);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (a.v[k] == target) sum[k] += Load(g.v[k]);
        }
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) Store(&out.v[k], sum[k]);
    StorePack<T, V>(dx + (row * d.w + w) * d.c + c, out);
  }
}

// ---- global average ----

// Threads of a [N, HW, C] reduction block: tx vectors of channels across, ty positions down.
dim3 ChannelBlock(int vectors) {
  int tx = 1;
  while (tx < 32 && tx < vectors) tx *= 2;
  return dim3(tx, kThreads / tx);
}

// y[n] = mean over positions of x[n]: one block per image and tile of channels, positions
// split over ty and added in a fixed tree.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    GlobalAvgForwardKernel(const T* x, int64_t positions, int channels, T* y) {
  __shared__ float s_sum[kThreads * V];
  const int64_t n = blockIdx.x;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
  const int ty = threadIdx.y;
  float sum[V] = {};
  if (c < channels) {
    for (int64_t s = ty; s < positions; s += blockDim.y) {
      const Pack<T, V> v = LoadPack<T, V>(x + (n * positions + s) * channels + c);
#pragma unroll
      for (int k = 0; k < V; ++k) sum[k] += Load(v.v[k]);
    }
  }
  const int slot = ty * blockDim.x + threadIdx.x;
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    if (ty < 2 * half) {
#pragma unroll
      for (int k = 0; k < V; ++k) s_sum[slot * V + k] = sum[k];
    }
    __syncthreads();
    if (ty < half) {
#pragma unroll
      for (int k = 0; k < V; ++k) sum[k] += s_sum[(slot + half * blockDim.x) * V + k];
    }
    __syncthreads();
  }
  if (ty != 0 || c >= channels) return;
  const float inv = 1.0f / static_cast<float>(positions);
  Pack<T, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k) Store(&out.v[k], sum[k] * inv);
  StorePack<T, V>(y + n * channels + c, out);
}

// dx[n, s] = dy[n] / positions: blocks per image, tile of channels and run of positions.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    GlobalAvgBackwardKernel(const T* dy, int64_t positions, int channels, T* dx) {
  const int64_t n = blockIdx.x;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
  if (c >= channels) return;
  const float inv = 1.0f / static_cast<float>(positions);
  const Pack<T, V> g = LoadPack<T, V>(dy + n * channels + c);
  Pack<T, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k) Store(&out.v[k], Load(g.v[k]) * inv);
  const int64_t step = static_cast<int64_t>(gridDim.z) * blockDim.y;
  for (int64_t s = blockIdx.z * blockDim.y + threadIdx.y; s < positions; s += step) {
    StorePack<T, V>(dx + (n * positions + s) * channels + c, out);
  }
}

}  // namespace

void MaxPoolForward(const Tensor& x, const PoolParams& p, Tensor* y, Tensor* argmax) {
  const PoolDims d = CheckPool("MaxPoolForward", x, p, *y);
  CHECK(argmax->dtype() == DType::kI32 && argmax->shape() == y->shape())
      << "MaxPoolForward: argmax " << argmax->ToString() << " must be int32 of y's shape "
      << ShapeString(y->shape());
  if (y->numel() == 0) return;
  const DeviceContext& ctx = Context(x.device());
  const unsigned rows = static_cast<unsigned>(d.n * d.oh);
  TALLY_DISPATCH_FLOAT(x.dtype(), "MaxPoolForward", T, {
    if (VectorAligned<T, kVec>(d.c, {x.raw_data(), y->raw_data()}) &&
        VectorAligned<int32_t, kVec>(d.c, {argmax->raw_data()})) {
      MaxPoolForwardKernel<T, kVec><<<rows, RowThreads(int64_t{d.ow} * d.c / kVec), 0,
                                      ctx.stream>>>(Ptr<T>(x), d, p, Ptr<T>(*y),
                                                    Ptr<int32_t>(*argmax));
    } else {
      MaxPoolForwardKernel<T, 1><<<rows, RowThreads(int64_t{d.ow} * d.c), 0, ctx.stream>>>(
          Ptr<T>(x), d, p, Ptr<T>(*y), Ptr<int32_t>(*argmax));
    }
    TALLY_LAUNCH_CHECK();
  });
}

void MaxPoolBackward(const Tensor& dy, const Tensor& argmax, Tensor* dx) {
  CHECK(IsFloat(dy.dtype()) && dx->dtype() == dy.dtype() && dy.ndim() == 4 && dx->ndim() == 4 &&
        dy.dim(0) == dx->dim(0) && dy.dim(3) == dx->dim(3))
      << "MaxPoolBackward: dy " << dy.ToString() << " and dx " << dx->ToString()
      << " disagree on dtype, images or channels";
  CHECK(argmax.dtype() == DType::kI32 && argmax.shape() == dy.shape())
      << "MaxPoolBackward: argmax " << argmax.ToString() << " must be int32 of dy's shape "
      << ShapeString(dy.shape());
  const PoolDims d = Dims("MaxPoolBackward", dx->shape(), dy.shape());
  if (dx->numel() == 0) return;
  const DeviceContext& ctx = Context(dx->device());
  if (dy.numel() == 0) {
    TALLY_CUDA_CHECK(cudaMemsetAsync(dx->raw_data(), 0, dx->nbytes(), ctx.stream));
    return;
  }
  CHECK_LE(d.ow, kMaxEnvelopeColumns) << "MaxPoolBackward: dy " << dy.ToString()
                                      << " is wider than the kernel supports";
  // int32: the lower envelopes [oh + ow], the upper ones [oh + ow], then the output ranges
  // of every input row and column.
  const int64_t env = d.oh + d.ow;
  Tensor ws = Workspace(dx->device(), sizeof(int32_t) * (2 * env + 2 * (d.h + d.w)));
  int32_t* lo = static_cast<int32_t*>(ws.raw_data());
  int32_t* hi = lo + env;
  int32_t* i_first = hi + env;
  int32_t* i_last = i_first + d.h;
  int32_t* j_first = i_last + d.h;
  int32_t* j_last = j_first + d.w;
  // Bytes 0x7f make INT32 0x7f7f7f7f, above any index; 0x80 make a negative number.
  TALLY_CUDA_CHECK(cudaMemsetAsync(lo, 0x7f, sizeof(int32_t) * env, ctx.stream));
  TALLY_CUDA_CHECK(cudaMemsetAsync(hi, 0x80, sizeof(int32_t) * env, ctx.stream));
  // About a thousand blocks: enough for every SM, few atomics per envelope entry.
  const int64_t per_block = std::max<int64_t>(1, d.n * d.oh / 1024);
  const dim3 grid(d.oh, static_cast<unsigned>((d.n + per_block - 1) / per_block));
  MaxPoolEnvelopeKernel<<<grid, kThreads, sizeof(int32_t) * 2 * d.ow, ctx.stream>>>(
      Ptr<int32_t>(argmax), d, static_cast<int>(per_block), 1.0 / d.w, lo, hi, lo + d.oh,
      hi + d.oh);
  TALLY_LAUNCH_CHECK();
  MaxPoolRangesKernel<<<(d.h + d.w + kThreads - 1) / kThreads, kThreads, 0, ctx.stream>>>(
      lo, hi, lo + d.oh, hi + d.oh, d, i_first, i_last, j_first, j_last);
  TALLY_LAUNCH_CHECK();
  const unsigned rows = static_cast<unsigned>(d.n * d.h);
  TALLY_DISPATCH_FLOAT(dy.dtype(), "MaxPoolBackward", T, {
    if (VectorAligned<T, kVec>(d.c, {dy.raw_data(), dx->raw_data()}) &&
        VectorAligned<int32_t, kVec>(d.c, {argmax.raw_data()})) {
      MaxPoolGatherKernel<T, kVec><<<rows, RowThreads(int64_t{d.w} * d.c / kVec), 0,
                                     ctx.stream>>>(Ptr<T>(dy), Ptr<int32_t>(argmax), d, i_first,
                                                   i_last, j_first, j_last, Ptr<T>(*dx));
    } else {
      MaxPoolGatherKernel<T, 1><<<rows, RowThreads(int64_t{d.w} * d.c), 0, ctx.stream>>>(
          Ptr<T>(dy), Ptr<int32_t>(argmax), d, i_first, i_last, j_first, j_last, Ptr<T>(*dx));
    }
    TALLY_LAUNCH_CHECK();
  });
}

void AvgPoolForward(const Tensor& x, const PoolParams& p, Tensor* y) {
  const PoolDims d = CheckPool("AvgPoolForward", x, p, *y);
  if (y->numel() == 0) return;
  const DeviceContext& ctx = Context(x.device());
  const unsigned rows = static_cast<unsigned>(d.n * d.oh);
  TALLY_DISPATCH_FLOAT(x.dtype(), "AvgPoolForward", T, {
    if (VectorAligned<T, kVec>(d.c, {x.raw_data(), y->raw_data()})) {
      AvgPoolForwardKernel<T, kVec><<<rows, RowThreads(int64_t{d.ow} * d.c / kVec), 0,
                                      ctx.stream>>>(Ptr<T>(x), d, p, Ptr<T>(*y));
    } else {
      AvgPoolForwardKernel<T, 1><<<rows, RowThreads(int64_t{d.ow} * d.c), 0, ctx.stream>>>(
          Ptr<T>(x), d, p, Ptr<T>(*y));
    }
    TALLY_LAUNCH_CHECK();
  });
}

void AvgPoolBackward(const Tensor& dy, const PoolParams& p, Tensor* dx) {
  const PoolDims d = CheckPool("AvgPoolBackward", *dx, p, dy);
  if (dx->numel() == 0) return;
  const DeviceContext& ctx = Context(dx->device());
  const unsigned rows = static_cast<unsigned>(d.n * d.h);
  TALLY_DISPATCH_FLOAT(dy.dtype(), "AvgPoolBackward", T, {
    if (VectorAligned<T, kVec>(d.c, {dy.raw_data(), dx->raw_data()})) {
      AvgPoolBackwardKernel<T, kVec><<<rows, RowThreads(int64_t{d.w} * d.c / kVec), 0,
                                       ctx.stream>>>(Ptr<T>(dy), d, p, Ptr<T>(*dx));
    } else {
      AvgPoolBackwardKernel<T, 1><<<rows, RowThreads(int64_t{d.w} * d.c), 0, ctx.stream>>>(
          Ptr<T>(dy), d, p, Ptr<T>(*dx));
    }
    TALLY_LAUNCH_CHECK();
  });
}

void GlobalAvgPoolForward(const Tensor& x, Tensor* y) {
  CHECK(IsFloat(x.dtype()) && y->dtype() == x.dtype() && x.ndim() == 4 &&
        y->shape() == Shape({x.dim(0), x.dim(3)}))
      << "GlobalAvgPoolForward: x " << x.ToString() << " and y " << y->ToString()
      << " must be float32, float16 or bfloat16 [N,H,W,C] and [N,C] of one dtype";
  CHECK_LT(x.dim(3), INT_MAX) << "GlobalAvgPoolForward: x " << x.ToString() << " too wide";
  const int64_t n = x.dim(0), positions = x.dim(1) * x.dim(2);
  const int c = static_cast<int>(x.dim(3));
  if (y->numel() == 0) return;
  const DeviceContext& ctx = Context(x.device());
  TALLY_DISPATCH_FLOAT(x.dtype(), "GlobalAvgPoolForward", T, {
    const bool vec = VectorAligned<T, kVec>(c, {x.raw_data(), y->raw_data()});
    const int v = vec ? kVec : 1;
    const dim3 block = ChannelBlock(c / v);
    const dim3 grid(static_cast<unsigned>(n), (c / v + block.x - 1) / block.x);
    if (vec) {
      GlobalAvgForwardKernel<T, kVec><<<grid, block, 0, ctx.stream>>>(Ptr<T>(x), positions, c,
                                                                      Ptr<T>(*y));
    } else {
      GlobalAvgForwardKernel<T, 1><<<grid, block, 0, ctx.stream>>>(Ptr<T>(x), positions, c,
                                                                   Ptr<T>(*y));
    }
    TALLY_LAUNCH_CHECK();
  });
}

void GlobalAvgPoolBackward(const Tensor& dy, Tensor* dx) {
  CHECK(IsFloat(dy.dtype()) && dx->dtype() == dy.dtype() && dx->ndim() == 4 &&
        dy.shape() == Shape({dx->dim(0), dx->dim(3)}))
      << "GlobalAvgPoolBackward: dy " << dy.ToString() << " and dx " << dx->ToString()
      << " must be float32, float16 or bfloat16 [N,C] and [N,H,W,C] of one dtype";
  CHECK_LT(dx->dim(3), INT_MAX) << "GlobalAvgPoolBackward: dx " << dx->ToString() << " too wide";
  const int64_t n = dx->dim(0), positions = dx->dim(1) * dx->dim(2);
  const int c = static_cast<int>(dx->dim(3));
  if (dx->numel() == 0) return;
  const DeviceContext& ctx = Context(dx->device());
  TALLY_DISPATCH_FLOAT(dy.dtype(), "GlobalAvgPoolBackward", T, {
    const bool vec = VectorAligned<T, kVec>(c, {dy.raw_data(), dx->raw_data()});
    const int v = vec ? kVec : 1;
    const dim3 block = ChannelBlock(c / v);
    // Runs of about 16 positions per thread row.
    const int64_t runs = std::min<int64_t>(65535, (positions + 16 * block.y - 1) / (16 * block.y));
    const dim3 grid(static_cast<unsigned>(n), (c / v + block.x - 1) / block.x,
                    static_cast<unsigned>(runs));
    if (vec) {
      GlobalAvgBackwardKernel<T, kVec><<<grid, block, 0, ctx.stream>>>(Ptr<T>(dy), positions, c,
                                                                       Ptr<T>(*dx));
    } else {
      GlobalAvgBackwardKernel<T, 1><<<grid, block, 0, ctx.stream>>>(Ptr<T>(dy), positions, c,
                                                                    Ptr<T>(*dx));
    }
    TALLY_LAUNCH_CHECK();
  });
}

}  // namespace cuda
}  // namespace tally
