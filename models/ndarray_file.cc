#include "models/ndarray_file.h"

#include "models/atomic_file.h"
#include "models/file_sizes.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace tally {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "NDArray I/O assumes little-endian");

// The first u32 of each array says which layout follows (docs/ndarray.md). Anything else is
// the legacy layout, whose first u32 is the number of dimensions.
constexpr uint32_t kV1Magic = 0xF993FAC8;  // shape, context, dtype, data
constexpr uint32_t kV2Magic = 0xF993FAC9;  // + storage type after the magic
constexpr uint32_t kV3Magic = 0xF993FACA;  // v2 with numpy shapes: ndim -1 is "none", 0 a scalar
constexpr int32_t kDenseStorage = 0;
constexpr int32_t kCpuDevice = 1;
// A dimension above this, or more dimensions than kMaxDims, means a corrupt file; refused
// before anything is allocated.
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int32_t kMaxDims = 32;
constexpr uint64_t kMaxCount = uint64_t{1} << 24;
constexpr uint64_t kMaxNameBytes = 4096;

// MXNet's type flags (mshadow's kFloat32 = 0 ...) for the dtypes Tally has.
int32_t TypeFlag(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 2;
    case DType::kU8: return 3;
    case DType::kI32: return 4;
    case DType::kBF16: return 12;
  }
  return -1;
}

constexpr int32_t kFloat64Flag = 1;

bool DTypeOfFlag(int32_t flag, DType* out) {
  for (DType t : {DType::kF32, DType::kF16, DType::kU8, DType::kI32, DType::kBF16}) {
    if (TypeFlag(t) == flag) {
      *out = t;
      return true;
    }
  }
  return false;
}

const char* FlagName(int32_t flag) {
  static const char* kNames[] = {"float32", "float64", "float16", "uint8",  "int32",
                                 "int8",    "int64",   "bool",    "int16",  "uint16",
                                 "uint32",  "uint64",  "bfloat16"};
  return flag >= 0 && flag < 13 ? kNames[flag] : "unknown";
}

// Reads the file front to back, knowing its size: every count and size read is compared
// with the bytes left before anything of that size is allocated. Errors name the file, the
// byte offset of the field and the field.
class Reader {
 public:
  Reader(const std::string& path, std::ifstream* f, uint64_t size) : path_(path), f_(f), size_(size) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }

  template <typename T>
  Status Get(T* v, const std::string& field) {
    return Bytes(v, sizeof(T), field);
  }
  Status Bytes(void* dst, uint64_t n, const std::string& field) {
    if (n > remaining()) {
      return Bad(offset_, field, "truncated: needs " + std::to_string(n) + " bytes, the file has " +
                                     std::to_string(remaining()) + " left (not a whole NDArray file)");
    }
    if (!f_->read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) {
      return Status::IoError(path_ + ": byte " + std::to_string(offset_) + ": " + field + ": read failed");
    }
    offset_ += n;
    return Status::Ok();
  }
  // "PATH: byte AT: FIELD: WHY".
  Status Bad(uint64_t at, const std::string& field, const std::string& why) const {
    return Status::InvalidArgument(path_ + ": byte " + std::to_string(at) + ": " + field + ": " + why);
  }

 private:
  const std::string& path_;
  std::ifstream* f_;
  const uint64_t size_;
  uint64_t offset_ = 0;
};

// The shape of one array, with `where` naming it ("array 3") in errors.
Status ReadShape(Reader* r, const std::string& where, bool legacy, int32_t ndim, Shape* shape) {
  for (int32_t i = 0; i < ndim; ++i) {
    const std::string field = where + "'s dimension " + std::to_string(i);
    const uint64_t at = r->offset();
    int64_t d = 0;
    if (legacy) {
      uint32_t d32;
      TALLY_RETURN_IF_ERROR(r->Get(&d32, field));
      d = d32;
    } else {
      TALLY_RETURN_IF_ERROR(r->Get(&d, field));
    }
    if (d < 0 || d > kMaxDim) return r->Bad(at, field, "bad dimension " + std::to_string(d));
    shape->push_back(d);
  }
  return Status::Ok();
}

// The elements of an array whose shape (read at `shape_at`) and type flag were read (dtype:
// the flag's, unless it is float64): their bytes, without wrapping, against what the file
// still holds, so that a crafted shape whose product wraps to a small number never
// allocates that small number.
Status ReadData(Reader* r, const std::string& where, const Shape& shape, uint64_t shape_at, int32_t flag,
                DType dtype, Tensor* out) {
  const bool f64 = flag == kFloat64Flag;
  const std::string data = where + "'s data";
  uint64_t bytes = 0;
  if (!ShapeBytes(shape, f64 ? sizeof(double) : DTypeSize(dtype), &bytes)) {
    return r->Bad(shape_at, where + "'s shape",
                  ShapeString(shape) + " has more elements than a tensor can hold (the product of the dimensions "
                  "overflows 64 bits)");
  }
  if (bytes > r->remaining()) {
    return r->Bad(r->offset(), data,
                  "truncated: " + std::string(FlagName(flag)) + ShapeString(shape) + " needs " +
                      std::to_string(bytes) + " bytes, the file has " + std::to_string(r->remaining()) + " left");
  }
  if (f64) {
    std::vector<double> wide(bytes / sizeof(double));
    TALLY_RETURN_IF_ERROR(r->Bytes(wide.data(), bytes, data));
    *out = Tensor::Empty(shape, DType::kF32);
    float* dst = out->data<float>();
    for (size_t i = 0; i < wide.size(); ++i) dst[i] = static_cast<float>(wide[i]);
    return Status::Ok();
  }
  *out = Tensor::Empty(shape, dtype);
  return r->Bytes(out->raw_data(), bytes, data);
}

// Reads one array: `where` names it in errors ("array 3").
Status ReadArray(Reader* r, const std::string& where, Tensor* out) {
  uint32_t magic;
  TALLY_RETURN_IF_ERROR(r->Get(&magic, where + "'s magic"));
  const bool legacy = magic != kV1Magic && magic != kV2Magic && magic != kV3Magic;
  if (magic == kV2Magic || magic == kV3Magic) {
    int32_t storage;
    const uint64_t at = r->offset();
    TALLY_RETURN_IF_ERROR(r->Get(&storage, where + "'s storage type"));
    if (storage != kDenseStorage) {
      return r->Bad(at, where + "'s storage type",
                    "sparse storage (type " + std::to_string(storage) + "); Tally reads dense arrays");
    }
  }
  int32_t ndim = static_cast<int32_t>(magic);
  const uint64_t ndim_at = legacy ? r->offset() - 4 : r->offset();
  if (!legacy) TALLY_RETURN_IF_ERROR(r->Get(&ndim, where + "'s ndim"));
  if (ndim < -1 || ndim > kMaxDims) {
    return r->Bad(ndim_at, where + "'s ndim", "bad dimension count " + std::to_string(ndim));
  }
  Shape shape;
  TALLY_RETURN_IF_ERROR(ReadShape(r, where, legacy, ndim, &shape));
  // An array that was never given a shape has nothing more (a 0-dim one before numpy mode).
  if (ndim == -1 || (ndim == 0 && magic != kV3Magic)) {
    *out = Tensor();
    return Status::Ok();
  }
  int32_t dev_type, dev_id, flag;
  TALLY_RETURN_IF_ERROR(r->Get(&dev_type, where + "'s device type"));
  TALLY_RETURN_IF_ERROR(r->Get(&dev_id, where + "'s device id"));
  const uint64_t flag_at = r->offset();
  TALLY_RETURN_IF_ERROR(r->Get(&flag, where + "'s type flag"));
  DType dtype = DType::kF32;
  if (flag != kFloat64Flag && !DTypeOfFlag(flag, &dtype)) {
    return r->Bad(flag_at, where + "'s type flag",
                  std::string(FlagName(flag)) + " (type flag " + std::to_string(flag) +
                      "); Tally reads float32, float64, float16, bfloat16, uint8 and int32");
  }
  return ReadData(r, where, shape, ndim_at, flag, dtype, out);
}

template <typename T>
void Put(std::ostream& f, T v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

void WriteArray(std::ostream& f, const Tensor& t) {
  Put<uint32_t>(f, kV2Magic);
  Put<int32_t>(f, kDenseStorage);
  Put<int32_t>(f, static_cast<int32_t>(t.ndim()));
  for (int64_t d : t.shape()) Put<int64_t>(f, d);
  Put<int32_t>(f, kCpuDevice);
  Put<int32_t>(f, 0);
  Put<int32_t>(f, TypeFlag(t.dtype()));
  f.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
}

}  // namespace

const Tensor* NDArrayFile::Find(const std::string& name) const {
  for (const NamedTensor& a : arrays) {
    if (a.name == name) return &a.tensor;
  }
  return nullptr;
}

Status WriteNDArrayFile(const std::string& path, const std::vector<NamedTensor>& arrays) {
  for (const NamedTensor& a : arrays) {
    // A 0-dim array would read back as "none" in version 2: MXNet has no scalar there.
    CHECK(a.tensor.defined() && a.tensor.device().is_cpu() && a.tensor.ndim() > 0)
        << a.name << ": not a CPU tensor with dimensions";
  }
  return WriteFileAtomically(path, [&](std::ostream& f) {
    Put<uint64_t>(f, kNDArrayListMagic);
    Put<uint64_t>(f, 0);  // reserved
    Put<uint64_t>(f, arrays.size());
    for (const NamedTensor& a : arrays) WriteArray(f, a.tensor);
    Put<uint64_t>(f, arrays.size());
    for (const NamedTensor& a : arrays) {
      Put<uint64_t>(f, a.name.size());
      f.write(a.name.data(), static_cast<std::streamsize>(a.name.size()));
    }
  });
}

Status ReadNDArrayFile(const std::string& path, NDArrayFile* out) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::NotFound(path + ": cannot open");
  const std::streamoff size = f.tellg();
  if (size < 0 || !f.seekg(0)) return Status::IoError(path + ": cannot find its size");
  Reader r(path, &f, static_cast<uint64_t>(size));
  uint64_t magic = 0, reserved = 0, count = 0;
  TALLY_RETURN_IF_ERROR(r.Get(&magic, "the magic"));
  if (magic != kNDArrayListMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(magic));
    return r.Bad(0, "the magic", std::string("not an MXNet NDArray file (it begins with ") + buf + ", not 0x112)");
  }
  TALLY_RETURN_IF_ERROR(r.Get(&reserved, "the reserved word"));
  const uint64_t count_at = r.offset();
  TALLY_RETURN_IF_ERROR(r.Get(&count, "the array count"));
  // Each array takes at least its 4-byte first word, and the name count's 8 bytes follow
  // them: a count the rest of the file cannot hold is refused before anything is allocated.
  const uint64_t room = r.remaining() < 8 ? 0 : (r.remaining() - 8) / 4;
  if (count > kMaxCount || count > room) {
    return r.Bad(count_at, "the array count",
                 std::to_string(count) + " arrays, but the " + std::to_string(r.remaining()) +
                     " bytes after it hold at most " + std::to_string(std::min(room, kMaxCount)));
  }
  NDArrayFile result;
  result.arrays.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    TALLY_RETURN_IF_ERROR(ReadArray(&r, "array " + std::to_string(i), &result.arrays[i].tensor));
  }
  uint64_t names = 0;
  const uint64_t names_at = r.offset();
  TALLY_RETURN_IF_ERROR(r.Get(&names, "the name count"));
  if (names != 0 && names != count) {
    return r.Bad(names_at, "the name count", std::to_string(names) + " names for " + std::to_string(count) + " arrays");
  }
  for (uint64_t i = 0; i < names; ++i) {
    const std::string field = "name " + std::to_string(i);
    uint64_t len = 0;
    const uint64_t len_at = r.offset();
    TALLY_RETURN_IF_ERROR(r.Get(&len, field + "'s length"));
    if (len > kMaxNameBytes || len > r.remaining()) {
      return r.Bad(len_at, field + "'s length",
                   std::to_string(len) + " bytes, above the cap of " + std::to_string(kMaxNameBytes) +
                       " or the " + std::to_string(r.remaining()) + " bytes left");
    }
    std::string& name = result.arrays[i].name;
    name.resize(len);
    TALLY_RETURN_IF_ERROR(r.Bytes(name.data(), len, field));
  }
  if (r.remaining() != 0) {
    return r.Bad(r.offset(), "the end", std::to_string(r.remaining()) + " bytes after the last name");
  }
  *out = std::move(result);
  return Status::Ok();
}

bool IsNDArrayFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t magic = 0;
  return f.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kNDArrayListMagic;
}

}  // namespace tally
