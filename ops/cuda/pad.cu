// PadLastDim and CropLastDim on the GPU: one thread per element of the wider tensor (pad) or
// of the narrower one (crop), moving raw elements of the dtype's size.
#include "ops/backends.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/pad_shape.h"

namespace tally {
namespace cuda {
namespace {

template <typename E>
__global__ void PadKernel(const E* x, E* y, int64_t rows, int64_t narrow, int64_t wide) {
  const int64_t n = rows * wide;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / wide, c = i - r * wide;
    y[i] = c < narrow ? x[r * narrow + c] : E(0);
  }
}

template <typename E>
__global__ void CropKernel(const E* x, E* y, int64_t rows, int64_t narrow, int64_t wide) {
  const int64_t n = rows * narrow;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / narrow, c = i - r * narrow;
    y[i] = x[r * wide + c];
  }
}

// pad: x is the narrow tensor and y the wide one; crop: the other way round.
template <typename E>
void LaunchAs(bool pad, const DeviceContext& ctx, const Tensor& x, Tensor* y,
              const LastDimCopy& c, int grid, int threads) {
  if (pad) {
    PadKernel<E><<<grid, threads, 0, ctx.stream>>>(Ptr<E>(x), Ptr<E>(*y), c.rows, c.narrow, c.wide);
  } else {
    CropKernel<E><<<grid, threads, 0, ctx.stream>>>(Ptr<E>(x), Ptr<E>(*y), c.rows, c.narrow, c.wide);
  }
  TALLY_LAUNCH_CHECK();
}

void Launch(bool pad, const Tensor& x, Tensor* y, const LastDimCopy& c) {
  const int64_t n = c.rows * (pad ? c.wide : c.narrow);
  if (n == 0) return;
  const DeviceContext& ctx = Context(x.device());
  constexpr int kThreads = 256;
  const int grid = GridFor(ctx, n, kThreads);
  switch (DTypeSize(x.dtype())) {
    case 1: LaunchAs<uint8_t>(pad, ctx, x, y, c, grid, kThreads); break;
    case 2: LaunchAs<uint16_t>(pad, ctx, x, y, c, grid, kThreads); break;
    default: LaunchAs<uint32_t>(pad, ctx, x, y, c, grid, kThreads); break;
  }
}

}  // namespace

void PadLastDim(const Tensor& x, Tensor* y) {
  Launch(/*pad=*/true, x, y, CheckLastDimCopy("PadLastDim", x, *y));
}

void CropLastDim(const Tensor& x, Tensor* y) {
  Launch(/*pad=*/false, x, y, CheckLastDimCopy("CropLastDim", *y, x));
}

}  // namespace cuda
}  // namespace tally
