#include "base/host_blocks.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <glog/logging.h>

namespace tally {
namespace {

class HostBlockCache {
 public:
  static HostBlockCache& Get() {
    static HostBlockCache* cache = new HostBlockCache();  // never destroyed: outlives tensors
    return *cache;
  }

  void* Allocate(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= bytes;
        ++counts_.reused;
        return p;
      }
      ++counts_.fresh;
    }
    return Fresh(bytes);
  }

  void Release(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + bytes <= limit_bytes_) {
        free_[bytes].push_back(p);
        cached_bytes_ += bytes;
        return;
      }
    }
    std::free(p);
  }

  HostBlockCounts counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  // Blocks of 2 MiB and more are 2 MiB-aligned and asked to be backed by huge pages, so that
  // their first touch costs a fault per 2 MiB instead of per 4 KiB (where the kernel has
  // transparent huge pages in "madvise" or "always" mode; a hint otherwise).
  static void* Fresh(size_t bytes) {
    constexpr size_t kHuge = size_t{2} << 20;
    void* p = nullptr;
    if (posix_memalign(&p, bytes >= kHuge ? kHuge : 4096, bytes) != 0) return nullptr;
    if (bytes >= kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
    return p;
  }

  HostBlockCache() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    limit_bytes_ = pages > 0 && page > 0 ? static_cast<size_t>(pages) * page / 2 : size_t{1} << 32;
  }
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // GUARDED_BY(mu_)
  size_t cached_bytes_ = 0;                               // GUARDED_BY(mu_)
  HostBlockCounts counts_;                                // GUARDED_BY(mu_)
  size_t limit_bytes_;
};

}  // namespace

size_t HostBlockBytes(size_t bytes) {
  if (bytes < kMinHostBlockBytes) return bytes;
  // Eight size classes per power of two (at most 12.5% more than asked): the many sizes
  // of a model's arrays and of their sealed frames share blocks, so the cache stops
  // growing as soon as the most blocks ever in flight at once are there.
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes));
  const size_t step = std::max<size_t>(top / 8, 4096);
  return (bytes + step - 1) / step * step;
}

void* TryAllocateHostBlock(size_t bytes) {
  if (bytes < kMinHostBlockBytes) return std::aligned_alloc(64, bytes == 0 ? 64 : (bytes + 63) / 64 * 64);
  return HostBlockCache::Get().Allocate(HostBlockBytes(bytes));
}

void* AllocateHostBlock(size_t bytes) {
  void* p = TryAllocateHostBlock(bytes);
  CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
  return p;
}

void ReleaseHostBlock(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kMinHostBlockBytes) {
    std::free(p);
    return;
  }
  HostBlockCache::Get().Release(p, HostBlockBytes(bytes));
}

HostBlockCounts HostBlockCounters() { return HostBlockCache::Get().counts(); }

}  // namespace tally
