// Asynchronous copies to the host, and the events that say when they have landed.
#include "ops/cuda/fence.h"

#include "ops/cuda/context.h"

namespace tally {
namespace cuda {

std::shared_ptr<void> CopyToHostAsync(const Tensor& src, Tensor* dst) {
  const DeviceContext& ctx = Context(src.device());
  if (src.nbytes() > 0) {
    TALLY_CUDA_CHECK(cudaMemcpyAsync(dst->raw_data(), src.raw_data(), src.nbytes(),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  }
  cudaEvent_t event;
  TALLY_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  TALLY_CUDA_CHECK(cudaEventRecord(event, ctx.stream));
  // The deleter may run on any thread and late in the process: a failure there is ignored.
  return std::shared_ptr<void>(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

void WaitEvent(void* event) { TALLY_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

}  // namespace cuda
}  // namespace tally
