// Element types in CUDA code: Tally's DType to a CUDA type, loads and stores through fp32.
//
//   TALLY_DISPATCH_FLOAT(x.dtype(), "relu", T, {
//     ReluKernel<T><<<grid, 256, 0, ctx.stream>>>(Ptr<T>(x), ...);
//   });
//   ...
//   template <typename T> __global__ void ReluKernel(const T* x, T* y, int64_t n) {
//     float v = Load(x[i]);  Store(&y[i], v > 0.f ? v : 0.f);
//   }
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <glog/logging.h>

#include "base/dtype.h"
#include "base/tensor.h"

namespace tally {
namespace cuda {

__host__ __device__ inline float Load(float v) { return v; }
__device__ inline float Load(__half v) { return __half2float(v); }
__device__ inline float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
__host__ __device__ inline void Store(float* p, float v) { *p = v; }
__device__ inline void Store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T> inline T* Ptr(const Tensor& t) { return static_cast<T*>(t.raw_data()); }

}  // namespace cuda
}  // namespace tally

// Runs `body` with `T` bound to the CUDA type of a float dtype (float, __half,
// __nv_bfloat16); any other dtype is a CHECK failure naming `op`.
#define TALLY_DISPATCH_FLOAT(dtype, op, T, ...)                                         \
  switch (dtype) {                                                                      \
    case ::tally::DType::kF32: { using T = float; __VA_ARGS__; break; }                 \
    case ::tally::DType::kF16: { using T = __half; __VA_ARGS__; break; }                \
    case ::tally::DType::kBF16: { using T = __nv_bfloat16; __VA_ARGS__; break; }        \
    default: LOG(FATAL) << op << ": no CUDA kernel for " << ::tally::DTypeName(dtype);  \
  }
