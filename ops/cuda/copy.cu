// Copies, dtype conversions, fills and layout permutations of tensors on CUDA devices
// (ops/cuda/runtime.h): what Tensor::CopyFrom, To, Fill, SetZero and NchwToNhwc do when a
// tensor lives on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <glog/logging.h>

#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/runtime.h"

namespace tally {
namespace cuda {
namespace {

// Loads and stores of every dtype through fp32, matching Tensor::CopyFrom on the host:
// floats round to nearest even, integers convert with a C++ cast.
__device__ inline float LoadAny(int32_t v) { return static_cast<float>(v); }
__device__ inline float LoadAny(uint8_t v) { return static_cast<float>(v); }
template <typename T> __device__ inline float LoadAny(T v) { return Load(v); }
__device__ inline void StoreAny(int32_t* p, float v) { *p = static_cast<int32_t>(v); }
__device__ inline void StoreAny(uint8_t* p, float v) { *p = static_cast<uint8_t>(v); }
template <typename T> __device__ inline void StoreAny(T* p, float v) { Store(p, v); }

template <typename S, typename D>
__global__ void ConvertKernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreAny(dst + i, LoadAny(src[i]));
  }
}

template <typename D>
__global__ void FillKernel(D* dst, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreAny(dst + i, value);
  }
}

struct PermuteShape {
  int64_t out[4];        // output dims
  int64_t in_stride[4];  // the input stride of each output axis
};

// One element per thread; E is an unsigned type of the element's size.
template <typename E>
__global__ void PermuteKernel(const E* x, E* y, PermuteShape s, int64_t n) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n;
       o += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = o, off = 0;
    for (int axis = 3; axis >= 0; --axis) {
      off += (rest % s.out[axis]) * s.in_stride[axis];
      rest /= s.out[axis];
    }
    y[o] = x[off];
  }
}

// Runs `body` with T bound to the CUDA type of any Tally dtype.
#define TALLY_DISPATCH_ANY(dtype, T, ...)                            \
  switch (dtype) {                                                   \
    case DType::kF32: { using T = float; __VA_ARGS__; break; }       \
    case DType::kF16: { using T = __half; __VA_ARGS__; break; }      \
    case DType::kBF16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
    case DType::kI32: { using T = int32_t; __VA_ARGS__; break; }     \
    case DType::kU8: { using T = uint8_t; __VA_ARGS__; break; }      \
  }

constexpr int kThreads = 256;

// src and dst on the same device, any dtypes.
void Convert(const DeviceContext& ctx, const Tensor& src, Tensor* dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  const int grid = GridFor(ctx, n, kThreads);
  TALLY_DISPATCH_ANY(src.dtype(), S, {
    TALLY_DISPATCH_ANY(dst->dtype(), D, {
      ConvertKernel<S, D><<<grid, kThreads, 0, ctx.stream>>>(Ptr<S>(src), Ptr<D>(*dst), n);
      TALLY_LAUNCH_CHECK();
    });
  });
}

// Same dtype, any pair of devices with at least one GPU. Queued on `ctx`'s stream; waits
// for it when the destination is host memory.
void CopyBytes(const DeviceContext& ctx, const Tensor& src, Tensor* dst) {
  if (src.nbytes() == 0) return;
  TALLY_CUDA_CHECK(cudaMemcpyAsync(dst->raw_data(), src.raw_data(), src.nbytes(),
                                   cudaMemcpyDefault, ctx.stream));
  if (dst->device().is_cpu()) TALLY_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

}  // namespace

void CopyTensor(const Tensor& src, Tensor* dst) {
  CHECK_EQ(src.numel(), dst->numel()) << "copy " << src.ToString() << " into " << dst->ToString();
  const Device sd = src.device(), dd = dst->device();
  const bool across_gpus = !sd.is_cpu() && !dd.is_cpu() && sd != dd;
  cudaStream_t source_stream = nullptr;
  if (across_gpus) {
    // Between two GPUs: the source's queued work must finish before the destination's
    // stream reads it.
    Synchronize(sd.index);
    source_stream = Context(sd).stream;
  }
  const DeviceContext& ctx = Context(dd.is_cpu() ? sd : dd);
  if (src.dtype() == dst->dtype()) {
    CopyBytes(ctx, src, dst);
  } else if (sd == dd) {
    Convert(ctx, src, dst);
  } else if (dd.is_cpu()) {
    // Across devices with a conversion: convert on the GPU side, through a scratch tensor.
    Tensor converted = Tensor::Empty(src.shape(), dst->dtype(), sd);
    Convert(ctx, src, &converted);
    CopyBytes(ctx, converted, dst);
  } else {
    Tensor moved = Tensor::Empty(src.shape(), src.dtype(), dd);
    CopyBytes(ctx, src, &moved);
    Convert(ctx, moved, dst);
  }
  if (across_gpus) {
    // The copy runs on the destination's stream, so nothing orders it before what the
    // source's stream does next: a write into src, or src's block reused once it is
    // freed. The source's stream waits for the copy.
    cudaEvent_t copied;
    TALLY_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    TALLY_CUDA_CHECK(cudaEventRecord(copied, ctx.stream));
    TALLY_CUDA_CHECK(cudaStreamWaitEvent(source_stream, copied, 0));
    TALLY_CUDA_CHECK(cudaEventDestroy(copied));
  }
}

void FillTensor(Tensor* t, float value) {
  const DeviceContext& ctx = Context(t->device());
  const int64_t n = t->numel();
  if (n == 0) return;
  const int grid = GridFor(ctx, n, kThreads);
  TALLY_DISPATCH_ANY(t->dtype(), D, {
    FillKernel<D><<<grid, kThreads, 0, ctx.stream>>>(Ptr<D>(*t), value, n);
    TALLY_LAUNCH_CHECK();
  });
}

void ZeroTensor(Tensor* t) {
  const DeviceContext& ctx = Context(t->device());
  if (t->nbytes() == 0) return;
  TALLY_CUDA_CHECK(cudaMemsetAsync(t->raw_data(), 0, t->nbytes(), ctx.stream));
}

void Permute4(const Tensor& x, const int perm[4], Tensor* y) {
  CHECK(x.ndim() == 4 && y->ndim() == 4 && x.dtype() == y->dtype() && x.device() == y->device())
      << "permute " << x.ToString() << " into " << y->ToString();
  const DeviceContext& ctx = Context(x.device());
  const Shape& s = x.shape();
  const int64_t stride[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  PermuteShape shape;
  for (int axis = 0; axis < 4; ++axis) {
    shape.out[axis] = y->dim(axis);
    shape.in_stride[axis] = stride[perm[axis]];
    CHECK_EQ(y->dim(axis), s[perm[axis]]) << "permute " << x.ToString() << " into " << y->ToString();
  }
  const int64_t n = x.numel();
  if (n == 0) return;
  const int grid = GridFor(ctx, n, kThreads);
  switch (DTypeSize(x.dtype())) {
    case 1:
      PermuteKernel<uint8_t><<<grid, kThreads, 0, ctx.stream>>>(Ptr<uint8_t>(x), Ptr<uint8_t>(*y), shape, n);
      break;
    case 2:
      PermuteKernel<uint16_t><<<grid, kThreads, 0, ctx.stream>>>(Ptr<uint16_t>(x), Ptr<uint16_t>(*y), shape, n);
      break;
    default:
      PermuteKernel<uint32_t><<<grid, kThreads, 0, ctx.stream>>>(Ptr<uint32_t>(x), Ptr<uint32_t>(*y), shape, n);
      break;
  }
  TALLY_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace tally
