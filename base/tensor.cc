#include "base/tensor.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "base/device_backend.h"
#include "base/host_blocks.h"

namespace tally {
namespace {

// Set once during static initialisation (tally_ops' backend), read afterwards.
const DeviceBackend* g_backend = nullptr;

Status CheckDeviceThroughBackend(const Device& device) {
  if (device.is_cpu()) return Status::Ok();
  return g_backend != nullptr && g_backend->check != nullptr ? g_backend->check(device)
                                                              : NoDeviceBackend(device);
}

}  // namespace

void InstallDeviceBackend(const DeviceBackend* backend) { g_backend = backend; }
const DeviceBackend* InstalledDeviceBackend() { return g_backend; }

Status NoDeviceBackend(const Device& device) {
  return Status::InvalidArgument(device.ToString() +
                                 ": this tally was built without CUDA (no CUDA toolkit "
                                 "was found, or -DTALLY_WITH_CUDA=OFF); use cpu devices or "
                                 "rebuild with the toolkit in /usr/local/cuda");
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string ShapeString(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << ']';
  return os.str();
}

std::string Device::ToString() const {
  return std::string(kind == Kind::kCpu ? "cpu:" : "cuda:") + std::to_string(index);
}

Status ParseDevice(const std::string& text, Device* out) {
  std::string kind = text, index = "0";
  size_t colon = text.find(':');
  if (colon != std::string::npos) {
    kind = text.substr(0, colon);
    index = text.substr(colon + 1);
  }
  char* end = nullptr;
  long i = std::strtol(index.c_str(), &end, 10);
  if (index.empty() || *end != '\0' || i < 0 || i > 1023) {
    return Status::InvalidArgument("bad device index in '" + text + "' (expected cpu:N or cuda:N)");
  }
  if (kind == "cpu") {
    *out = Device::Cpu(static_cast<int>(i));
    return Status::Ok();
  }
  if (kind == "cuda" || kind == "gpu") {
    Device d{Device::Kind::kCuda, static_cast<int>(i)};
    TALLY_RETURN_IF_ERROR(CheckDeviceThroughBackend(d));
    *out = d;
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown device '" + text + "' (expected cpu:N or cuda:N)");
}

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
    : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::Allocate(size_t bytes, Device device) {
  if (!device.is_cpu()) {
    if (g_backend != nullptr && g_backend->allocate != nullptr) return g_backend->allocate(bytes, device);
    LOG(FATAL) << "cannot allocate on " << device.ToString() << ": " << CheckDeviceThroughBackend(device);
  }
  void* p = AllocateHostBlock(bytes);
  return std::make_shared<Storage>(p, bytes, device, [bytes](void* q) { ReleaseHostBlock(q, bytes); });
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) CHECK_GE(d, 0) << "negative dimension in " << ShapeString(shape);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = Storage::Allocate(static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype), device);
  return t;
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  t.SetZero();
  return t;
}

Tensor Tensor::FromBlob(void* data, const Shape& shape, DType dtype, Device device,
                        std::function<void(void*)> release) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype),
                                         device, std::move(release));
  return t;
}

Tensor Tensor::FromStorage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  CHECK_LE(static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype), storage->bytes())
      << "a " << DTypeName(dtype) << ShapeString(shape) << " view of " << storage->bytes() << " bytes";
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  CHECK(defined() && ndim() >= 1);
  CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "slice [" << begin << "," << end << ") of " << ToString();
  Tensor t = *this;
  int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.offset_ += static_cast<size_t>(begin * row) * DTypeSize(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  CHECK_EQ(NumElements(shape), numel()) << "reshape " << ToString() << " to " << ShapeString(shape);
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(shape_, dtype_, device());
  t.CopyFrom(*this);
  return t;
}

Tensor Tensor::To(DType dtype) const {
  Tensor t = Empty(shape_, dtype, device());
  t.CopyFrom(*this);
  return t;
}

void Tensor::CopyFrom(const Tensor& src) {
  CHECK_EQ(src.numel(), numel()) << "copy " << src.ToString() << " into " << ToString();
  if (!device().is_cpu() || !src.device().is_cpu()) {
    CHECK(g_backend != nullptr && g_backend->copy != nullptr)
        << "copy " << src.ToString() << " into " << ToString() << " in a build without CUDA";
    g_backend->copy(src, this);
    return;
  }
  size_t n = static_cast<size_t>(numel());
  if (src.dtype_ == dtype_) {
    std::memmove(raw_data(), src.raw_data(), nbytes());
    return;
  }
  // Go through fp32 for anything else; the common 16-bit cases are direct and vectorised.
  Tensor f32 = src.dtype_ == DType::kF32 ? src : Empty(src.shape_, DType::kF32, device());
  float* f = static_cast<float*>(f32.raw_data());
  if (src.dtype_ != DType::kF32) {
    const void* s = src.raw_data();
    switch (src.dtype_) {
      case DType::kF16: HalfToFloat(static_cast<const uint16_t*>(s), f, n); break;
      case DType::kBF16: BFloat16ToFloat(static_cast<const uint16_t*>(s), f, n); break;
      case DType::kI32: for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(static_cast<const int32_t*>(s)[i]); break;
      case DType::kU8: for (size_t i = 0; i < n; ++i) f[i] = static_cast<const uint8_t*>(s)[i]; break;
      case DType::kF32: break;
    }
  }
  void* d = raw_data();
  switch (dtype_) {
    case DType::kF32: std::memcpy(d, f, n * 4); break;
    case DType::kF16: FloatToHalf(f, static_cast<uint16_t*>(d), n); break;
    case DType::kBF16: FloatToBFloat16(f, static_cast<uint16_t*>(d), n); break;
    case DType::kI32: for (size_t i = 0; i < n; ++i) static_cast<int32_t*>(d)[i] = static_cast<int32_t>(f[i]); break;
    case DType::kU8: for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(d)[i] = static_cast<uint8_t>(f[i]); break;
  }
}

void Tensor::Fill(float value) {
  if (!device().is_cpu() && g_backend != nullptr && g_backend->fill != nullptr) {
    g_backend->fill(this, value);
    return;
  }
  size_t n = static_cast<size_t>(numel());
  switch (dtype_) {
    case DType::kF32: { float* p = data<float>(); for (size_t i = 0; i < n; ++i) p[i] = value; break; }
    case DType::kF16: { uint16_t h = FloatToHalf(value); uint16_t* p = data<uint16_t>(); for (size_t i = 0; i < n; ++i) p[i] = h; break; }
    case DType::kBF16: { uint16_t h = FloatToBFloat16(value); uint16_t* p = data<uint16_t>(); for (size_t i = 0; i < n; ++i) p[i] = h; break; }
    case DType::kI32: { int32_t* p = data<int32_t>(); for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(value); break; }
    case DType::kU8: std::memset(raw_data(), static_cast<int>(value), n); break;
  }
}

void Tensor::SetZero() {
  if (!device().is_cpu() && g_backend != nullptr && g_backend->zero != nullptr) {
    g_backend->zero(this);
    return;
  }
  std::memset(raw_data(), 0, nbytes());
}

std::string Tensor::ToString() const {
  if (!defined()) return "undefined";
  return std::string(DTypeName(dtype_)) + ShapeString(shape_) + "@" + device().ToString();
}

static Tensor Permute4(const Tensor& x, const Shape& out_shape, int a, int b, int c, int d) {
  CHECK_EQ(x.ndim(), 4) << x.ToString();
  Tensor y = Tensor::Empty(out_shape, x.dtype(), x.device());
  if (!x.device().is_cpu() && g_backend != nullptr && g_backend->permute4 != nullptr) {
    const int perm[4] = {a, b, c, d};
    g_backend->permute4(x, perm, &y);
    return y;
  }
  const Shape& s = x.shape();
  int64_t stride[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  size_t es = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  int64_t o = 0;
  for (int64_t i0 = 0; i0 < out_shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < out_shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < out_shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < out_shape[3]; ++i3, ++o) {
          int64_t off = i0 * stride[a] + i1 * stride[b] + i2 * stride[c] + i3 * stride[d];
          std::memcpy(dst + o * es, src + off * es, es);
        }
  return y;
}

Tensor NchwToNhwc(const Tensor& x) {
  const Shape& s = x.shape();
  return Permute4(x, {s[0], s[2], s[3], s[1]}, 0, 2, 3, 1);
}

Tensor NhwcToNchw(const Tensor& x) {
  const Shape& s = x.shape();
  return Permute4(x, {s[0], s[3], s[1], s[2]}, 0, 3, 1, 2);
}

}  // namespace tally
