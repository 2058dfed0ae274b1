// A caching allocator of device or page-locked host memory for the GPU input path (nvJPEG's
// buffers and the loader's own): blocks handed back are kept and handed out again, never
// returned to CUDA until the pool dies.
//
//   BlockPool device(BlockPool::Kind::kDevice);
//   void* buf = device.Allocate(bytes, stream);     // nullptr when CUDA has no memory left
//   ... queue work on `stream` that uses buf ...
//   device.Release(buf, stream);                    // reusable once that work has run
//
// Why: cudaFree and cudaFreeHost wait for the whole device, so a decoder that frees a buffer
// while a training step runs makes the next batch's decode wait for that step, and the step
// after it wait for the decode: the two run one after the other instead of side by side.
// nvJPEG's default allocators free and allocate as the images of a batch change size.
//
// A block handed back is reused once the work queued on its stream before the hand-back has
// run (an event), or, in a stream-ordered pool, at once for device memory asked for on that
// same stream, whose order already keeps the uses apart. Pinned memory is written by the
// host, so it always waits for the event; so does the device memory of a pool that is not
// stream-ordered, for writers that ignore stream order (nvJPEG's hardware decoder writes its
// output when called, not when the work queued before the call on its stream has run, as
// reported for nvJPEG 12.3 to 13.2 on H100). Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tally {

class BlockPool {
 public:
  enum class Kind { kDevice, kPinned };
  explicit BlockPool(Kind kind, bool stream_ordered = true) : kind_(kind), stream_ordered_(stream_ordered) {}
  ~BlockPool();  // frees every block: nothing may use them any more
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // nullptr when CUDA has no memory left.
  void* Allocate(size_t bytes, cudaStream_t stream);
  // `ptr` may still be used by work queued on `stream`; a pointer not from this pool is a bug.
  void Release(void* ptr, cudaStream_t stream);

  int64_t cuda_allocations() const;  // blocks taken from CUDA so far
  size_t bytes() const;              // their total size

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    bool in_use = false;
    cudaStream_t stream = nullptr;  // where it was last handed back
    cudaEvent_t released = nullptr;  // recorded there at that moment
  };
  bool Reusable(const Block& b, size_t bytes, cudaStream_t stream) const;

  const Kind kind_;
  const bool stream_ordered_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;  // GUARDED_BY(mu_)
  int64_t cuda_allocations_ = 0;  // GUARDED_BY(mu_)
  size_t bytes_ = 0;              // GUARDED_BY(mu_)
};

}  // namespace tally
