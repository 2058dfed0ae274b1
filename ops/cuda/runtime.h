// What ops/device_backend.cc, ops/device.cc and ops/graph.cc need from the CUDA side, declared
// without CUDA headers so that those files compile with the host compiler. Defined in
// ops/cuda/ and linked only into builds with CUDA; callers guard their calls with
// TALLY_HAVE_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ops/device.h"
#include "ops/graph.h"
#include "base/tensor.h"

namespace tally {
namespace cuda {

int DeviceCount();  // 0 when there is no driver or no GPU; never fails
std::string Describe(int index);

// Device memory from the device's caching allocator (ops/cuda/allocator.cc).
std::shared_ptr<Storage> AllocateDevice(size_t bytes, Device device);
DeviceMemoryStats MemoryStats(int index);
void EmptyCache(int index);

// Page-locked host memory (ops/cuda/pinned.cc).
std::shared_ptr<Storage> AllocatePinned(size_t bytes);
bool IsPinned(const void* p);

void Synchronize(int index);

// CUDA graphs behind DeviceGraph (ops/cuda/graph.cc). REQUIRES: `devices` are distinct cuda
// devices that exist (ops/graph.cc checks them). On success *out is a new graph, which
// DestroyGraph deletes.
Status CaptureGraph(const std::vector<Device>& devices, const std::function<void()>& body,
                    DeviceGraph::Impl** out);
void LaunchGraph(DeviceGraph::Impl* graph);
int64_t GraphNodeCount(const DeviceGraph::Impl& graph);
void DestroyGraph(DeviceGraph::Impl* graph);

// Tensor data movement for tensors of which at least one is on a CUDA device
// (ops/cuda/copy.cu). REQUIRES: equal element counts.
//   CopyTensor: any pair of devices; dtypes may differ (converted on the GPU side). When dst is
//     on the host it waits for the copy.
void CopyTensor(const Tensor& src, Tensor* dst);
void FillTensor(Tensor* t, float value);
void ZeroTensor(Tensor* t);
// y = x with its axes permuted: y[i0,i1,i2,i3] = x[...] where output axis j is input axis perm[j].
void Permute4(const Tensor& x, const int perm[4], Tensor* y);

}  // namespace cuda
}  // namespace tally
