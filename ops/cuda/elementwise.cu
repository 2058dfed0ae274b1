// ReLU and addition over whole tensors, fp32, fp16 or bf16. Pure streaming: 16-byte vectors
// in a grid-stride loop when every pointer allows, the last numel % V elements one by one.
// Each element is read before the same thread writes it, so outputs may alias inputs as the
// CPU ops allow.
#include <cuda_runtime.h>

#include "ops/backends.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/vector_math.cuh"

namespace tally {
namespace cuda {
namespace {

constexpr int kThreads = 256;

void CheckPair(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b) {
  const DType t = a.dtype();
  CHECK((t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) && b.dtype() == t &&
        a.shape() == b.shape())
      << op << ": " << an << " " << a.ToString() << " and " << bn << " " << b.ToString()
      << " must be float32, float16 or bfloat16 of one dtype and shape";
}

enum class Fn { kRelu, kReluBackward, kAdd };

// The op on one element; for kReluBackward a is y and b is dy.
template <Fn kFn>
__device__ inline float Apply(float a, float b) {
  if (kFn == Fn::kRelu) return a > 0.0f ? a : 0.0f;
  if (kFn == Fn::kReluBackward) return a > 0.0f ? b : 0.0f;
  return a + b;
}

// out[i] = f(a[i], b[i]) for i < n; b is not read for kRelu. Vectors [0, n / V * V), then
// the tail.
template <typename T, int V, Fn kFn>
__global__ void ElementwiseKernel(const T* a, const T* b, int64_t n, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t i = first; i < vectors; i += stride) {
    const Pack<T, V> pa = LoadPack<T, V>(a + i * V);
    Pack<T, V> pb;
    if (kFn != Fn::kRelu) pb = LoadPack<T, V>(b + i * V);
    Pack<T, V> po;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      Store(&po.v[k], Apply<kFn>(Load(pa.v[k]), kFn != Fn::kRelu ? Load(pb.v[k]) : 0.0f));
    }
    StorePack<T, V>(out + i * V, po);
  }
  const int64_t tail = vectors * V + first;
  if (tail < n) {
    Store(&out[tail], Apply<kFn>(Load(a[tail]), kFn != Fn::kRelu ? Load(b[tail]) : 0.0f));
  }
}

template <Fn kFn>
void Launch(const char* op, const Tensor& a, const Tensor* b, Tensor* out) {
  const int64_t n = a.numel();
  if (n == 0) return;
  const DeviceContext& ctx = Context(a.device());
  TALLY_DISPATCH_FLOAT(a.dtype(), op, T, {
    constexpr int V = kVec16<T>;
    const T* bp = b != nullptr ? Ptr<T>(*b) : nullptr;
    // Alignment only: the tail loop takes any numel.
    if (VectorAligned<T, V>(0, {a.raw_data(), bp, out->raw_data()})) {
      ElementwiseKernel<T, V, kFn><<<GridFor(ctx, (n + V - 1) / V, kThreads), kThreads, 0,
                                     ctx.stream>>>(Ptr<T>(a), bp, n, Ptr<T>(*out));
    } else {
      ElementwiseKernel<T, 1, kFn><<<GridFor(ctx, n, kThreads), kThreads, 0, ctx.stream>>>(
          Ptr<T>(a), bp, n, Ptr<T>(*out));
    }
    TALLY_LAUNCH_CHECK();
  });
}

}  // namespace

void ReluForward(const Tensor& x, Tensor* y) {
  CheckPair("ReluForward", "x", x, "y", *y);
  Launch<Fn::kRelu>("ReluForward", x, nullptr, y);
}

void ReluBackward(const Tensor& y, const Tensor& dy, Tensor* dx) {
  CheckPair("ReluBackward", "y", y, "dy", dy);
  CheckPair("ReluBackward", "y", y, "dx", *dx);
  Launch<Fn::kReluBackward>("ReluBackward", y, &dy, dx);
}

void Add(const Tensor& a, const Tensor& b, Tensor* y) {
  CheckPair("Add", "a", a, "b", b);
  CheckPair("Add", "a", a, "y", *y);
  Launch<Fn::kAdd>("Add", a, &b, y);
}

}  // namespace cuda
}  // namespace tally
