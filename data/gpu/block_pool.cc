#include "data/gpu/block_pool.h"

#include <glog/logging.h>

#include "ops/cuda/check.h"

namespace tally {
namespace {

// Rounded up so that slightly different sizes share blocks.
constexpr size_t kGranule = size_t{64} << 10;
size_t RoundUp(size_t n) { return (n + kGranule - 1) / kGranule * kGranule; }

}  // namespace

BlockPool::~BlockPool() {
  for (Block& b : blocks_) {
    if (b.released != nullptr) TALLY_CUDA_CHECK(cudaEventSynchronize(b.released));
    if (kind_ == Kind::kDevice) {
      TALLY_CUDA_CHECK(cudaFree(b.ptr));
    } else {
      TALLY_CUDA_CHECK(cudaFreeHost(b.ptr));
    }
    if (b.released != nullptr) TALLY_CUDA_CHECK(cudaEventDestroy(b.released));
  }
}

bool BlockPool::Reusable(const Block& b, size_t bytes, cudaStream_t stream) const {
  // A block much larger than asked for is kept for a request its size.
  // A free block has been handed back, so it has its `released` event.
  if (b.in_use || b.size < bytes || b.size > 2 * bytes + kGranule) return false;
  if (stream_ordered_ && kind_ == Kind::kDevice && b.stream == stream && stream != nullptr) return true;
  const cudaError_t e = cudaEventQuery(b.released);
  if (e == cudaErrorNotReady) return false;
  TALLY_CUDA_CHECK(e);
  return true;
}

void* BlockPool::Allocate(size_t bytes, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Block* best = nullptr;
  for (Block& b : blocks_) {
    if (Reusable(b, bytes, stream) && (best == nullptr || b.size < best->size)) best = &b;
  }
  if (best != nullptr) {
    best->in_use = true;
    return best->ptr;
  }
  Block b;
  b.size = RoundUp(bytes == 0 ? 1 : bytes);
  const cudaError_t e = kind_ == Kind::kDevice ? cudaMalloc(&b.ptr, b.size)
                                               : cudaHostAlloc(&b.ptr, b.size, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    LOG(WARNING) << "GPU loader: " << (kind_ == Kind::kDevice ? "cudaMalloc" : "cudaHostAlloc") << "(" << b.size
                 << ") failed: " << cudaGetErrorString(e);
    (void)cudaGetLastError();  // not sticky: clear it so that the caller's next check is its own
    return nullptr;
  }
  b.in_use = true;
  ++cuda_allocations_;
  bytes_ += b.size;
  blocks_.push_back(b);
  return b.ptr;
}

void BlockPool::Release(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Block& b : blocks_) {
    if (b.ptr != ptr) continue;
    CHECK(b.in_use) << "GPU loader: a pool block handed back twice";
    if (b.released == nullptr) TALLY_CUDA_CHECK(cudaEventCreateWithFlags(&b.released, cudaEventDisableTiming));
    TALLY_CUDA_CHECK(cudaEventRecord(b.released, stream));
    b.stream = stream;
    b.in_use = false;
    return;
  }
  LOG(FATAL) << "GPU loader: a pointer handed back to a pool that did not allocate it";
}

int64_t BlockPool::cuda_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cuda_allocations_;
}

size_t BlockPool::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace tally
