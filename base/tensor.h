// Tensor: an n-dimensional array of one dtype on one device, a view into shared storage.
//
//   Tensor x = Tensor::Empty({32, 224, 224, 3}, DType::kF32);   // cpu:0, NHWC
//   Tensor first_half = x.Slice(0, 16);                          // shares x's storage
//   float* p = first_half.data<float>();
//   Tensor h = x.To(DType::kF16);                                // a converted copy
//
// Layout: row-major and contiguous. Activations are NHWC on every device; convolution
// weights are [K, R, S, C] (out channels, kernel height, kernel width, in channels).
// Copying a Tensor copies the view, not the bytes (like a shared_ptr); Clone() copies bytes.
// A CUDA tensor's data() is a device pointer; To, CopyFrom, Fill and SetZero work on any
// device, queued on the device's stream (ops/device.h); CopyFrom into a host tensor waits.
// This library has no CUDA in it: device memory and device copies are reached through the
// DeviceBackend that tally_ops installs (base/device_backend.h), so code that links only
// base (the scheduler) links no CUDA library.
// Storage lives until the last view of it is gone. Tensors are not synchronised: two
// threads may read one tensor, but a writer needs exclusive access.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "base/dtype.h"
#include "base/status.h"

namespace tally {

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& s);
std::string ShapeString(const Shape& s);  // "[32,224,224,3]"

struct Device {
  enum class Kind : uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;

  static Device Cpu(int index = 0) { return Device{Kind::kCpu, index}; }
  bool is_cpu() const { return kind == Kind::kCpu; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const;  // "cpu:0", "cuda:1"
};

// Parses "cpu", "cpu:N", "cuda:N" or "gpu:N". A CUDA device must exist: the message says
// why not (a build without CUDA, no GPU, too high an index; see CheckDevice in ops/device.h;
// a program without tally_ops refuses every cuda:N as a build without CUDA does).
Status ParseDevice(const std::string& text, Device* out);

// Raw bytes owned by a deleter. Host allocations are 64-byte aligned; blocks of 256 KiB and
// more are page-aligned and kept in a process-wide cache for reuse when released. Device
// allocations come from the device's caching allocator (ops/device.h), through the backend.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  static std::shared_ptr<Storage> Allocate(size_t bytes, Device device);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  static Tensor Empty(const Shape& shape, DType dtype, Device device = Device::Cpu());
  static Tensor Zeros(const Shape& shape, DType dtype, Device device = Device::Cpu());
  // Wraps memory Tensor does not own; `release` runs when the last view is gone.
  static Tensor FromBlob(void* data, const Shape& shape, DType dtype, Device device,
                         std::function<void(void*)> release);

  // Views the first NumElements(shape) * DTypeSize(dtype) bytes of `storage`.
  static Tensor FromStorage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw_data() const { return static_cast<char*>(storage_->data()) + offset_; }
  // REQUIRES: T matches dtype(); 16-bit floats are read as uint16_t.
  template <typename T> T* data() const {
    if constexpr (std::is_same_v<T, uint16_t>) {
      CHECK(dtype_ == DType::kF16 || dtype_ == DType::kBF16) << ToString();
    } else {
      CHECK(dtype_ == DTypeOf<T>::value) << "tensor " << ToString() << " read as another dtype";
    }
    return static_cast<T*>(raw_data());
  }

  // Rows [begin, end) of the first dimension; shares storage.
  Tensor Slice(int64_t begin, int64_t end) const;
  // The same bytes seen with another shape of equal element count.
  Tensor Reshape(const Shape& shape) const;
  Tensor Clone() const;
  Tensor To(DType dtype) const;  // a converted copy (a plain copy when dtype is the same)
  // Copies src's values into this tensor, converting dtype, across devices too.
  // REQUIRES: equal element counts.
  void CopyFrom(const Tensor& src);
  void Fill(float value);
  void SetZero();

  std::string ToString() const;  // "float32[32,224,224,3]@cpu:0"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from storage_->data()
  Shape shape_;
  DType dtype_ = DType::kF32;
};

// Conversions between the NCHW layout of other frameworks and Tally's NHWC.
Tensor NchwToNhwc(const Tensor& x);
Tensor NhwcToNchw(const Tensor& x);

}  // namespace tally
