// ops/device.h: the host-compiler side. Everything CUDA-specific is behind ops/cuda/runtime.h,
// called only in builds with CUDA.
#include "ops/device.h"

#include <atomic>
#include <mutex>

#include <glog/logging.h>

#include "base/device_backend.h"

#ifdef TALLY_HAVE_CUDA
#include "ops/cuda/fence.h"
#include "ops/cuda/runtime.h"
#endif

namespace tally {
namespace {

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_deterministic{false};

std::mutex& LabelMutex() {
  static std::mutex mu;
  return mu;
}
std::string& LabelStorage() {
  static std::string* label = new std::string();
  return *label;
}

}  // namespace

bool BuiltWithCuda() {
#ifdef TALLY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
#ifdef TALLY_HAVE_CUDA
  return cuda::DeviceCount();
#else
  return 0;
#endif
}

Status CheckDevice(const Device& device) {
  if (device.is_cpu()) return Status::Ok();
  const std::string name = device.ToString();
  if (!BuiltWithCuda()) {
    return NoDeviceBackend(device);
  }
  const int count = CudaDeviceCount();
  if (count == 0) {
    return Status::Unavailable(name + ": no CUDA device is visible to this process (no GPU, no "
                               "driver, or CUDA_VISIBLE_DEVICES hides them)");
  }
  if (device.index >= count) {
    return Status::InvalidArgument(name + ": this machine has " + std::to_string(count) +
                                   (count == 1 ? " GPU (cuda:0)" : " GPUs (cuda:0 to cuda:" +
                                                                   std::to_string(count - 1) + ")"));
  }
  return Status::Ok();
}

std::string DeviceDescription(const Device& device) {
#ifdef TALLY_HAVE_CUDA
  if (!device.is_cpu()) return cuda::Describe(device.index);
#endif
  return device.ToString();
}

void Synchronize(const Device& device) {
#ifdef TALLY_HAVE_CUDA
  if (!device.is_cpu()) cuda::Synchronize(device.index);
#endif
}

void SetAllowTf32(bool allow) { g_allow_tf32 = allow; }
bool AllowTf32() { return g_allow_tf32; }

void SetDeterministic(bool deterministic) { g_deterministic = deterministic; }
bool Deterministic() { return g_deterministic; }

void SetNodeLabel(const std::string& label) {
  std::lock_guard<std::mutex> lock(LabelMutex());
  LabelStorage() = label;
}

std::string NodeLabel() {
  std::lock_guard<std::mutex> lock(LabelMutex());
  return LabelStorage();
}

DeviceMemoryStats GetDeviceMemoryStats(int cuda_index) {
#ifdef TALLY_HAVE_CUDA
  return cuda::MemoryStats(cuda_index);
#else
  return DeviceMemoryStats();
#endif
}

void EmptyDeviceCache(int cuda_index) {
#ifdef TALLY_HAVE_CUDA
  cuda::EmptyCache(cuda_index);
#endif
}

Tensor PinnedEmpty(const Shape& shape, DType dtype) {
#ifdef TALLY_HAVE_CUDA
  if (CudaDeviceCount() > 0) {
    const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
    std::shared_ptr<Storage> storage = cuda::AllocatePinned(bytes);
    return Tensor::FromStorage(std::move(storage), shape, dtype);
  }
#endif
  return Tensor::Empty(shape, dtype);
}

bool IsPinned(const void* host_pointer) {
#ifdef TALLY_HAVE_CUDA
  return cuda::IsPinned(host_pointer);
#else
  return false;
#endif
}

void DeviceFence::Wait() const {
#ifdef TALLY_HAVE_CUDA
  if (event_ != nullptr) cuda::WaitEvent(event_.get());
#endif
}

DeviceFence CopyToHostAsync(const Tensor& src, Tensor* dst) {
  CHECK(!src.device().is_cpu() && dst->device().is_cpu() && src.dtype() == dst->dtype() &&
        src.numel() == dst->numel())
      << "CopyToHostAsync from " << src.ToString() << " into " << dst->ToString()
      << ": needs a GPU source, a host destination, one dtype and one size";
  DeviceFence fence;
#ifdef TALLY_HAVE_CUDA
  fence.event_ = cuda::CopyToHostAsync(src, dst);
#endif
  return fence;
}

}  // namespace tally
