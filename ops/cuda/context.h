// The per-device state every CUDA op uses: its stream and its library handles.
//
//   const DeviceContext& ctx = Context(x.device());   // also makes it the thread's device
//   Kernel<<<blocks, threads, 0, ctx.stream>>>(...);
//
// One context per device, created on first use and kept for the life of the process. The
// stream is shared by every thread (see ops/device.h for why). The cuDNN and cuBLASLt
// handles are bound to that stream; cuDNN handles must not be used by two threads at
// once, so ops that use one take the context's lock (ContextLock).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <mutex>
#include <vector>

#include "ops/cuda/check.h"
#include "base/tensor.h"

namespace tally {
namespace cuda {

struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
  int sm_count = 0;          // multiprocessors, for sizing grids
  std::mutex* library_mu;    // serialises use of the cudnn and lt handles
};

// REQUIRES: device is a cuda device that exists (CheckDevice).
const DeviceContext& Context(const Device& device);
using ContextLock = std::lock_guard<std::mutex>;

// The streams of the devices whose contexts exist so far (creates none).
std::vector<cudaStream_t> ActiveStreams();

// Scratch device memory for one op: from the caching allocator, freed when it goes out of
// scope (safe, since later work on the stream runs after the op's kernels).
Tensor Workspace(const Device& device, size_t bytes);

// Grid size for a grid-stride loop over n elements with `threads` per block.
int GridFor(const DeviceContext& ctx, int64_t n, int threads);

}  // namespace cuda
}  // namespace tally
