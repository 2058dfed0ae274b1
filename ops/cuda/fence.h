// The CUDA side of DeviceFence and CopyToHostAsync (ops/device.h), declared without CUDA
// headers so that ops/device.cc compiles with the host compiler.
#pragma once

#include <memory>

#include "base/tensor.h"

namespace tally {
namespace cuda {

// Queues the bytes of src (a GPU tensor) into dst (host) on src's device's stream, then an
// event after them; returns the event, destroyed when the last owner lets it go.
std::shared_ptr<void> CopyToHostAsync(const Tensor& src, Tensor* dst);
// Blocks until the event (from CopyToHostAsync) has been reached.
void WaitEvent(void* event);

}  // namespace cuda
}  // namespace tally
