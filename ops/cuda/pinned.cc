// Page-locked host memory for PinnedEmpty (ops/device.h), cached for reuse.
//
// Unlike device blocks, a pinned block is read and written by copies on any device's stream
// while the host goes on, so a freed block may still be the source or target of a queued
// copy. Its release therefore records an event on every device stream in use, and the block
// is handed out again only once those events have completed.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <glog/logging.h>

#include "ops/cuda/context.h"
#include "ops/cuda/runtime.h"

namespace tally {
namespace cuda {
namespace {

struct FreeBlock {
  void* p;
  std::vector<cudaEvent_t> pending;  // copies that may still use the block
};

class PinnedCache {
 public:
  void* Allocate(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto range = free_.equal_range(bytes);
      for (auto it = range.first; it != range.second; ++it) {
        if (Idle(&it->second)) {
          void* p = it->second.p;
          free_.erase(it);
          return p;
        }
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      LOG(FATAL) << "out of page-locked host memory allocating " << bytes
                 << " bytes; lower --batch-size";
    }
    TALLY_CUDA_CHECK(e);
    return p;
  }

  // Storage's deleter. Event failures are ignored rather than fatal: this can run while the
  // process exits and the driver is already gone, when nothing will use the block again.
  void Free(void* p, size_t bytes) {
    FreeBlock block{p, {}};
    // An event can only be recorded on a stream of the device it was created on, so each
    // stream's event is made on that stream's device; the caller's device is put back after.
    int caller_device = -1;
    if (cudaGetDevice(&caller_device) != cudaSuccess) {
      cudaGetLastError();
      caller_device = -1;
    }
    for (cudaStream_t stream : ActiveStreams()) {
      int device = -1;
      cudaEvent_t event;
      // A stream being recorded into a CUDA graph runs nothing now: an event recorded there
      // would become part of the graph and never complete. Such a stream does not guard the
      // block: a graph's pinned inputs are the caller's to keep alive (ops/graph.h).
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
          capturing != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        continue;
      }
      if (cudaStreamGetDevice(stream, &device) != cudaSuccess ||
          cudaSetDevice(device) != cudaSuccess ||
          cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      if (cudaEventRecord(event, stream) != cudaSuccess) {
        cudaGetLastError();
        cudaEventDestroy(event);
        continue;
      }
      block.pending.push_back(event);
    }
    if (caller_device >= 0 && cudaSetDevice(caller_device) != cudaSuccess) cudaGetLastError();
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace(bytes, std::move(block));
  }

 private:
  // Whether every copy queued before the block was freed has finished; drops finished events.
  static bool Idle(FreeBlock* b) {
    while (!b->pending.empty()) {
      cudaError_t e = cudaEventQuery(b->pending.back());
      if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
      }
      TALLY_CUDA_CHECK(e);
      TALLY_CUDA_CHECK(cudaEventDestroy(b->pending.back()));
      b->pending.pop_back();
    }
    return true;
  }

  std::mutex mu_;
  std::multimap<size_t, FreeBlock> free_;  // GUARDED_BY(mu_)
};

PinnedCache& Cache() {
  static auto* cache = new PinnedCache();  // never destroyed: outlives tensors
  return *cache;
}

}  // namespace

std::shared_ptr<Storage> AllocatePinned(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = Cache().Allocate(rounded);
  return std::make_shared<Storage>(p, bytes, Device::Cpu(),
                                   [rounded](void* q) { Cache().Free(q, rounded); });
}

bool IsPinned(const void* p) {
  if (DeviceCount() == 0 || p == nullptr) return false;
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace cuda
}  // namespace tally
