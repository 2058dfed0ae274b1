// Checks around every CUDA, cuDNN and cuBLAS call and after every kernel launch.
//
//   TALLY_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, ctx.stream));
//   MyKernel<<<grid, block, 0, ctx.stream>>>(...);
//   TALLY_LAUNCH_CHECK();
//
// A failure here is fatal: the device or its library is in a state the op cannot recover
// from (out of memory is caught earlier, by the allocator, with its own message). The
// message names the source file and line, the call, the library's error name and text,
// the device the calling thread was using, and this process (SetNodeLabel), e.g.
//   ops/cuda/conv2d.cc:212: cuDNN error CUDNN_STATUS_BAD_PARAM on cuda:0 (worker 1 on
//   host-a) in `cudnnBackendFinalize(plan)`: ...
// The one exception is the body of DeviceGraph::Capture (ops/graph.h): there a failure
// throws CaptureError (ops/cuda/capture.h) with this message, and Capture returns it.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace tally {
namespace cuda {

[[noreturn]] void FailCall(const char* library, const char* error, const char* detail,
                           const char* expr, const char* file, int line);

inline void CheckCuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) FailCall("CUDA", cudaGetErrorName(e), cudaGetErrorString(e), expr, file, line);
}
// A failure's detail is cuDNN's own account of it (cudnnGetLastErrorString).
[[noreturn]] void FailCudnn(cudnnStatus_t s, const char* expr, const char* file, int line);
inline void CheckCudnn(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) FailCudnn(s, expr, file, line);
}
void CheckCublas(cublasStatus_t s, const char* expr, const char* file, int line);

}  // namespace cuda
}  // namespace tally

#define TALLY_CUDA_CHECK(expr) ::tally::cuda::CheckCuda((expr), #expr, __FILE__, __LINE__)
#define TALLY_CUDNN_CHECK(expr) ::tally::cuda::CheckCudnn((expr), #expr, __FILE__, __LINE__)
#define TALLY_CUBLAS_CHECK(expr) ::tally::cuda::CheckCublas((expr), #expr, __FILE__, __LINE__)
// After a <<<...>>> launch: a bad configuration shows up here, a fault inside the kernel at
// the next synchronising call.
#define TALLY_LAUNCH_CHECK() \
  ::tally::cuda::CheckCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
