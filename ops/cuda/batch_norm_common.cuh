// What the batch-norm kernels of ops/cuda/batch_norm.cu (forward) and
// batch_norm_backward.cu (backward) share: the checks of their tensors, the grid of a
// BnPartition, a block's rows, and the fixed merge tree over a block's thread rows.
#pragma once

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
namespace bn {

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

inline Dims CheckDims(const char* op, const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
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

inline void CheckLike(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  CHECK(t.dtype() == x.dtype() && t.shape() == x.shape())
      << op << ": " << name << " " << t.ToString() << " must match x " << x.ToString();
}

inline const float* In(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
inline float* Out(Tensor* t) { return static_cast<float*>(t->raw_data()); }
template <typename T> inline const T* InOrNull(const Tensor* t) { return t ? Ptr<T>(*t) : nullptr; }

inline dim3 Grid(const BnPartition& p) {
  return dim3(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.chunks));
}
inline dim3 Block(const BnPartition& p) {
  return dim3(static_cast<unsigned>(p.tx), static_cast<unsigned>(p.ty));
}
inline dim3 FinalizeGrid(int channels) {
  return dim3(static_cast<unsigned>((channels + kBnFinalizeWidth - 1) / kBnFinalizeWidth));
}
inline const dim3 kFinalizeBlock(kBnFinalizeWidth, kBnFinalizeDepth);

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


}  // namespace bn
}  // namespace cuda
}  // namespace tally
