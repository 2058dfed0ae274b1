// The caching device allocator behind Tensor::Empty on cuda:N (see ops/device.h).
//
// Blocks are never split: a request is rounded up (512 B below 1 MiB, 2 MiB above) and served
// by the smallest cached block of at least that size that wastes little (at most 2x for
// small blocks, 1/8 for large ones), or by a fresh cudaMalloc. A training step asks for the
// same sizes every time, so from its second step on every request is a cache hit. Every
// block is used on the device's one stream only, so a freed block can be handed out again at
// once: whatever the new owner queues runs after the old owner's work.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <glog/logging.h>

#include "ops/cuda/context.h"
#include "ops/cuda/runtime.h"

namespace tally {
namespace cuda {
namespace {

constexpr size_t kSmallLimit = 1 << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 2 << 20;

size_t RoundUp(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

std::string MiB(int64_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return os.str();
}

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int index) : index_(index) {}

  void* Allocate(size_t bytes, size_t* block_bytes) {
    const size_t want = RoundUp(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(want);
      const size_t slack = want < kSmallLimit ? want : want / 8;
      if (it != free_.end() && it->first <= want + slack) {
        void* p = it->second;
        *block_bytes = it->first;
        stats_.bytes_cached -= it->first;
        free_.erase(it);
        NoteInUse(*block_bytes);
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, want);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ReleaseCached();
      e = cudaMalloc(&p, want);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      DeviceMemoryStats s = Stats();
      LOG(FATAL) << "cuda:" << index_ << ": out of GPU memory allocating " << MiB(bytes)
                 << " (Tally holds " << MiB(s.bytes_in_use) << " in use and "
                 << MiB(s.bytes_cached) << " cached; the device has " << MiB(free_bytes)
                 << " free of " << MiB(total_bytes)
                 << "); lower --batch-size, or free the GPU from other processes";
    }
    TALLY_CUDA_CHECK(e);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.device_mallocs;
    *block_bytes = want;
    NoteInUse(want);
    return p;
  }

  // Called from Storage's deleter: no CUDA call here (it may run while the process exits).
  void Free(void* p, size_t block_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace(block_bytes, p);
    stats_.bytes_in_use -= block_bytes;
    stats_.bytes_cached += block_bytes;
  }

  // Returns every cached block to the driver, once the stream has finished with them.
  void ReleaseCached() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [size, p] : free_) blocks.push_back(p);
      free_.clear();
      stats_.bytes_cached = 0;
    }
    if (blocks.empty()) return;
    TALLY_CUDA_CHECK(cudaStreamSynchronize(Context(Device{Device::Kind::kCuda, index_}).stream));
    for (void* p : blocks) TALLY_CUDA_CHECK(cudaFree(p));
  }

  DeviceMemoryStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  void NoteInUse(size_t bytes) {  // REQUIRES: mu_ held
    stats_.bytes_in_use += bytes;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }

  const int index_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;  // GUARDED_BY(mu_): block size -> block
  DeviceMemoryStats stats_;            // GUARDED_BY(mu_)
};

// One allocator per device, never destroyed (tensors may outlive static destructors).
DeviceAllocator& AllocatorFor(int index) {
  static std::mutex mu;
  static auto* allocators = new std::unordered_map<int, DeviceAllocator*>();
  std::lock_guard<std::mutex> lock(mu);
  DeviceAllocator*& a = (*allocators)[index];
  if (a == nullptr) a = new DeviceAllocator(index);
  return *a;
}

}  // namespace

std::shared_ptr<Storage> AllocateDevice(size_t bytes, Device device) {
  Context(device);  // the calling thread now uses this device; fails clearly if it is absent
  DeviceAllocator& allocator = AllocatorFor(device.index);
  size_t block_bytes = 0;
  void* p = allocator.Allocate(bytes, &block_bytes);
  return std::make_shared<Storage>(p, bytes, device, [&allocator, block_bytes](void* q) {
    allocator.Free(q, block_bytes);
  });
}

DeviceMemoryStats MemoryStats(int index) { return AllocatorFor(index).Stats(); }

void EmptyCache(int index) { AllocatorFor(index).ReleaseCached(); }

}  // namespace cuda
}  // namespace tally
