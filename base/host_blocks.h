// Host blocks: large host buffers kept for reuse instead of going back to the system.
//
//   HostBlock b = HostBlock::Allocate(8 << 20);   // 8 MiB, page-aligned
//   std::memcpy(b.data(), src, 8 << 20);
//   void* p = b.Release();                        // hand the bytes to someone who frees them
//   ReleaseHostBlock(p, b.bytes());               // ... with this, from any thread
//
// A step of training or of the parameter server allocates the same sizes every time (the
// model's arrays, their sealed frames, the frames received), and a fresh block of megabytes
// costs an mmap and a page fault per 4 KiB on first touch: about 50,000 faults for one
// ResNet-50 push and pull in fp32. Blocks of at least kMinHostBlockBytes are rounded up to
// one of eight size classes per power of two, kept when released and handed out again for
// the same class; the cache holds at most half the machine's memory. Thread-safe.
#pragma once

#include <cstddef>

namespace tally {

// Smaller requests go to malloc, whose free lists serve them without faults; from 128 KiB
// up (its default mmap threshold) each malloc may be a fresh mmap.
constexpr size_t kMinHostBlockBytes = 64 << 10;

// The size a block of `bytes` really has: its size class when it is large enough to be
// cached, `bytes` otherwise.
size_t HostBlockBytes(size_t bytes);
// A block of HostBlockBytes(bytes) bytes, page-aligned when large (64-byte aligned
// otherwise); never null (CHECKs on exhaustion). ReleaseHostBlock gives it back.
void* AllocateHostBlock(size_t bytes);
// The same, returning null when the system has no memory for it (for sizes a peer chose).
void* TryAllocateHostBlock(size_t bytes);
// `bytes` is the size given to AllocateHostBlock.
void ReleaseHostBlock(void* p, size_t bytes);

// The cache's counters since the process started: blocks handed out from the cache and
// blocks newly allocated (each of which was faulted in once).
struct HostBlockCounts {
  long long reused = 0, fresh = 0;
};
HostBlockCounts HostBlockCounters();

}  // namespace tally
