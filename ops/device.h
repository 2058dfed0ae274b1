// CUDA devices as seen from code that includes no CUDA header: how many there are, their
// streams, their memory, and pinned host memory for fast copies.
//
//   TALLY_RETURN_IF_ERROR(CheckDevice(dev));           // "cuda:3: this machine has 1 GPU"
//   Tensor x = Tensor::Empty({256, 224, 224, 4}, DType::kF16, dev);
//   Tensor staging = PinnedEmpty({256, 224, 224, 4}, DType::kF16);   // host, page-locked
//   x.CopyFrom(staging);                               // queued on dev's stream
//   Synchronize(dev);
//
// Streams: each device has one stream, shared by every thread; every op, copy and kernel
// for the device is queued on it, in call order. Device memory therefore never needs
// events: a block freed and reused is reused by work queued after everything that used it.
// A copy to the host waits for the stream, so its bytes are ready when CopyFrom returns.
//
// Memory: device allocations come from a caching allocator (one per device). Freed blocks
// are kept and reused, so after its first step a training step makes no cudaMalloc calls
// (DeviceMemoryStats::device_mallocs counts them). When a cudaMalloc fails the cache is
// returned to the driver and the call retried once before the out-of-memory error, which
// names the device, the request and the memory in use and cached.
//
// A build without CUDA (cmake -DTALLY_WITH_CUDA=OFF, or no toolkit) has none of this:
// CudaDeviceCount() is 0 and CheckDevice() refuses every cuda:N, saying why.
//
// Thread-safety: every function here may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

// Whether this build has the CUDA ops.
bool BuiltWithCuda();
// The number of CUDA devices this process can use; 0 without CUDA, a driver or a GPU.
int CudaDeviceCount();
// OK for cpu devices and for a cuda:N that exists; otherwise a message naming the device
// and the reason (no CUDA in this build, no driver, not that many GPUs).
Status CheckDevice(const Device& device);
// "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" for a cuda device; "cpu" for the CPU.
std::string DeviceDescription(const Device& device);

// Waits until everything queued on the device's stream has run. A no-op for the CPU.
void Synchronize(const Device& device);

// Whether fp32 convolutions and GEMMs may use TF32 tensor cores (10-bit mantissa inputs,
// fp32 accumulation). Off by default: fp32 means fp32, and the GPU-vs-CPU tests hold fp32
// to 1e-5. fp16 and bf16 use tensor cores regardless.
void SetAllowTf32(bool allow);
bool AllowTf32();

// Whether GPU ops must give the same bits on every run: cuDNN engines that accumulate with
// atomics in an unspecified order (numerical note NONDETERMINISTIC, typically some
// backward-filter kernels) are then skipped. Off by default, as in PyTorch and MXNet; turn
// it on when runs must repeat bit for bit (exact resume on GPUs). Tally's own kernels are
// deterministic either way.
void SetDeterministic(bool deterministic);
bool Deterministic();

// Names this process in CUDA error messages ("worker 3 on host-a"); "" by default.
void SetNodeLabel(const std::string& label);
std::string NodeLabel();

struct DeviceMemoryStats {
  int64_t device_mallocs = 0;     // cudaMalloc calls so far
  int64_t bytes_in_use = 0;       // held by live tensors
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_cached = 0;       // freed, kept for reuse
};
DeviceMemoryStats GetDeviceMemoryStats(int cuda_index);
// Returns the cached blocks of one device to the driver (after its stream is idle).
void EmptyDeviceCache(int cuda_index);

// A host (cpu) tensor in page-locked memory, which the GPU copies to and from at full link
// speed and asynchronously. Blocks are cached for reuse; a block is handed out again only
// after the copies queued on it have finished. Without CUDA: ordinary host memory.
Tensor PinnedEmpty(const Shape& shape, DType dtype);
// Whether a host pointer is page-locked memory from PinnedEmpty.
bool IsPinned(const void* host_pointer);

// A point in one device's stream: Wait() returns once everything queued on the stream before
// it has run. A default-made fence has been reached already. Copyable; cheap.
class DeviceFence {
 public:
  DeviceFence() = default;
  void Wait() const;

 private:
  friend DeviceFence CopyToHostAsync(const Tensor& src, Tensor* dst);
  std::shared_ptr<void> event_;  // a CUDA event, destroyed with the last copy of the fence
};

// Queues a copy of a GPU tensor into host memory and returns without waiting for it: dst's
// bytes are there once the returned fence is waited for, and neither tensor may be written
// before then. dst should be page-locked (PinnedEmpty), else CUDA copies synchronously.
// REQUIRES: src on a cuda device, dst on the host, the same dtype and element count.
DeviceFence CopyToHostAsync(const Tensor& src, Tensor* dst);

// Installs this library's DeviceBackend (ops/device_backend.cc) for base's tensors: their
// device memory, copies, fills and permutes. ops/install_backend.cc calls it before main in
// every program that links tally_ops; nothing else needs to.
void InstallOpsDeviceBackend();

}  // namespace tally
