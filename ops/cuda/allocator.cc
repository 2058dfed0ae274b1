// The caching device allocator behind Tensor::Empty on cuda:N (see ops/device.h), and the
// private pools of captured CUDA graphs (ops/graph.h, ops/cuda/capture.h).
//
// Blocks are never split: a request is rounded up (512 B below 1 MiB, 2 MiB above) and served
// by the smallest cached block of at least that size that wastes little (at most 2x for
// small blocks, 1/8 for large ones), or by a fresh cudaMalloc. A training step asks for the
// same sizes every time, so from its second step on every request is a cache hit. Every
// block is used on the device's one stream only, so a freed block can be handed out again at
// once: whatever the new owner queues runs after the old owner's work.
//
// Graph pools. A graph replays its work on the addresses it had when captured, so a block
// the capture used must not be handed to anyone else while the graph may run. While cuda:N
// is captured, every allocation on it is served from the capture's pool: a free list of its
// own, topped up from the ordinary free list and then by cudaMalloc (counted in the device's
// stats like any other). A block from a
// pool always returns to that pool when freed, since its Storage's deleter holds the pool.
// A block of the ordinary cache freed during the capture joins the pool as well (the
// recorded work may use it), and a block of an older pool freed during the capture makes the
// new pool keep the older one. A pool lives as long as its graph and the last tensor made
// from it; its blocks, all free by then, then move to the ordinary free list. Pooled blocks
// count as cached when free; EmptyDeviceCache returns only the ordinary ones to the driver.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <glog/logging.h>

#include "ops/cuda/capture.h"
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

using FreeList = std::multimap<size_t, void*>;  // block size -> block

// Removes and returns the smallest block of `list` that holds `want` bytes with little
// waste (see the top of the file), or null.
void* TakeFitting(FreeList* list, size_t want, size_t* block_bytes) {
  auto it = list->lower_bound(want);
  const size_t slack = want < kSmallLimit ? want : want / 8;
  if (it == list->end() || it->first > want + slack) return nullptr;
  void* p = it->second;
  *block_bytes = it->first;
  list->erase(it);
  return p;
}

class DeviceAllocator;

}  // namespace

class GraphPool {
 public:
  explicit GraphPool(DeviceAllocator* allocator) : allocator_(allocator) {}
  ~GraphPool();  // hands its blocks to the ordinary free list

  // Both GUARDED_BY the allocator's mutex.
  FreeList free;
  std::vector<std::shared_ptr<GraphPool>> kept;  // older pools whose blocks this graph used

 private:
  DeviceAllocator* const allocator_;
};

namespace {

struct Block {
  void* p = nullptr;
  size_t bytes = 0;                  // the rounded size
  std::shared_ptr<GraphPool> pool;   // null for the ordinary cache
};

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int index) : index_(index) {}

  Block Allocate(size_t bytes) {
    Block b;
    const size_t want = RoundUp(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      b.pool = capture_pool_;
      // While captured, a miss in the pool takes a block of the ordinary cache into the pool
      // (its earlier users' work is queued before anything the graph runs), so that recording
      // a step needs no more memory than running it.
      if ((b.pool != nullptr && (b.p = TakeFitting(&b.pool->free, want, &b.bytes)) != nullptr) ||
          (b.p = TakeFitting(&free_, want, &b.bytes)) != nullptr) {
        stats_.bytes_cached -= b.bytes;
        NoteInUse(b.bytes);
        return b;
      }
    }
    cudaError_t e = cudaMalloc(&b.p, want);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ReleaseCached();
      e = cudaMalloc(&b.p, want);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      DeviceMemoryStats s = Stats();
      std::ostringstream message;
      message << "cuda:" << index_ << ": out of GPU memory allocating " << MiB(bytes)
              << " (Tally holds " << MiB(s.bytes_in_use) << " in use and "
              << MiB(s.bytes_cached) << " cached; the device has " << MiB(free_bytes)
              << " free of " << MiB(total_bytes)
              << "); lower --batch-size, or free the GPU from other processes";
      // Inside a capture's body the capture fails with the message instead (ops/graph.h).
      if (CaptureBodyScope::Active()) throw CaptureError(message.str());
      LOG(FATAL) << message.str();
    }
    TALLY_CUDA_CHECK(e);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.device_mallocs;
    b.bytes = want;
    NoteInUse(want);
    return b;
  }

  // Called from Storage's deleter: no CUDA call here (it may run while the process exits).
  // `pool` is the block's pool, null for a block of the ordinary cache.
  void Free(void* p, size_t block_bytes, const std::shared_ptr<GraphPool>& pool) {
    std::lock_guard<std::mutex> lock(mu_);
    GraphPool* capture = capture_pool_.get();
    if (pool != nullptr && capture != nullptr && pool.get() != capture &&
        std::find(capture->kept.begin(), capture->kept.end(), pool) == capture->kept.end()) {
      capture->kept.push_back(pool);
    }
    FreeList& home = pool != nullptr ? pool->free : capture != nullptr ? capture->free : free_;
    home.emplace(block_bytes, p);
    stats_.bytes_in_use -= block_bytes;
    stats_.bytes_cached += block_bytes;
  }

  // Returns every block of the ordinary free list to the driver, once the stream has
  // finished with them. Keeps them while the device is captured: the wait would break the
  // capture.
  void ReleaseCached() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (capture_pool_ != nullptr) return;
      for (auto& [size, p] : free_) {
        blocks.push_back(p);
        stats_.bytes_cached -= size;
      }
      free_.clear();
    }
    if (blocks.empty()) return;
    TALLY_CUDA_CHECK(cudaStreamSynchronize(Context(Device{Device::Kind::kCuda, index_}).stream));
    for (void* p : blocks) TALLY_CUDA_CHECK(cudaFree(p));
  }

  DeviceMemoryStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  std::shared_ptr<GraphPool> BeginCapture() {
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_pool_ != nullptr) return nullptr;
    capture_pool_ = std::make_shared<GraphPool>(this);
    return capture_pool_;
  }

  void EndCapture() {
    std::shared_ptr<GraphPool> ended;  // destroyed after the lock is released
    std::lock_guard<std::mutex> lock(mu_);
    ended = std::move(capture_pool_);
  }

  // From ~GraphPool: its blocks, all free, join the ordinary free list.
  void Adopt(FreeList* blocks) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.merge(*blocks);
  }

 private:
  void NoteInUse(size_t bytes) {  // REQUIRES: mu_ held
    stats_.bytes_in_use += bytes;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }

  const int index_;
  std::mutex mu_;
  FreeList free_;                              // GUARDED_BY(mu_)
  std::shared_ptr<GraphPool> capture_pool_;    // GUARDED_BY(mu_); set while captured
  DeviceMemoryStats stats_;                    // GUARDED_BY(mu_)
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

GraphPool::~GraphPool() { allocator_->Adopt(&free); }

std::shared_ptr<Storage> AllocateDevice(size_t bytes, Device device) {
  Context(device);  // the calling thread now uses this device; fails clearly if it is absent
  DeviceAllocator& allocator = AllocatorFor(device.index);
  Block b = allocator.Allocate(bytes);
  return std::make_shared<Storage>(b.p, bytes, device,
                                   [&allocator, block_bytes = b.bytes, pool = std::move(b.pool)](
                                       void* q) { allocator.Free(q, block_bytes, pool); });
}

DeviceMemoryStats MemoryStats(int index) { return AllocatorFor(index).Stats(); }

void EmptyCache(int index) { AllocatorFor(index).ReleaseCached(); }

std::shared_ptr<GraphPool> BeginPoolCapture(int index) {
  return AllocatorFor(index).BeginCapture();
}

void EndPoolCapture(int index) { AllocatorFor(index).EndCapture(); }

}  // namespace cuda
}  // namespace tally
