#include "models/ndarray_file.h"

#include "models/atomic_file.h"

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

class Reader {
 public:
  Reader(const std::string& path, std::ifstream* f) : path_(path), f_(f) {}

  template <typename T>
  Status Get(T* v, const std::string& what) {
    if (!f_->read(reinterpret_cast<char*>(v), sizeof(T))) return Truncated(what);
    return Status::Ok();
  }
  Status Bytes(void* dst, uint64_t n, const std::string& what) {
    if (!f_->read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) return Truncated(what);
    return Status::Ok();
  }
  Status Bad(const std::string& why) const { return Status::InvalidArgument(path_ + ": " + why); }

 private:
  Status Truncated(const std::string& what) const {
    return Status::InvalidArgument(path_ + ": truncated in " + what + " (not a whole NDArray file)");
  }
  const std::string& path_;
  std::ifstream* f_;
};

// Reads one array: `where` names it in errors ("array 3").
Status ReadArray(Reader* r, const std::string& where, Tensor* out) {
  uint32_t magic;
  TALLY_RETURN_IF_ERROR(r->Get(&magic, where));
  const bool legacy = magic != kV1Magic && magic != kV2Magic && magic != kV3Magic;
  if (magic == kV2Magic || magic == kV3Magic) {
    int32_t storage;
    TALLY_RETURN_IF_ERROR(r->Get(&storage, where));
    if (storage != kDenseStorage) {
      return r->Bad(where + " has sparse storage (type " + std::to_string(storage) +
                    "); Tally reads dense arrays");
    }
  }
  int32_t ndim = static_cast<int32_t>(magic);
  if (!legacy) TALLY_RETURN_IF_ERROR(r->Get(&ndim, where));
  if (ndim < -1 || ndim > kMaxDims) return r->Bad(where + ": bad dimension count " + std::to_string(ndim));
  Shape shape;
  for (int32_t i = 0; i < ndim; ++i) {
    int64_t d = 0;
    if (legacy) {
      uint32_t d32;
      TALLY_RETURN_IF_ERROR(r->Get(&d32, where));
      d = d32;
    } else {
      TALLY_RETURN_IF_ERROR(r->Get(&d, where));
    }
    if (d < 0 || d > kMaxDim) return r->Bad(where + ": bad dimension " + std::to_string(d));
    shape.push_back(d);
  }
  // An array that was never given a shape has nothing more (a 0-dim one before numpy mode).
  if (ndim == -1 || (ndim == 0 && magic != kV3Magic)) {
    *out = Tensor();
    return Status::Ok();
  }
  int32_t dev_type, dev_id, flag;
  TALLY_RETURN_IF_ERROR(r->Get(&dev_type, where));
  TALLY_RETURN_IF_ERROR(r->Get(&dev_id, where));
  TALLY_RETURN_IF_ERROR(r->Get(&flag, where));
  DType dtype = DType::kF32;
  const bool f64 = flag == kFloat64Flag;
  if (!f64 && !DTypeOfFlag(flag, &dtype)) {
    return r->Bad(where + " holds " + FlagName(flag) + " (type flag " + std::to_string(flag) +
                  "); Tally reads float32, float64, float16, bfloat16, uint8 and int32");
  }
  if (f64) {
    std::vector<double> wide(NumElements(shape));
    TALLY_RETURN_IF_ERROR(r->Bytes(wide.data(), wide.size() * sizeof(double), where + "'s data"));
    *out = Tensor::Empty(shape, DType::kF32);
    float* dst = out->data<float>();
    for (size_t i = 0; i < wide.size(); ++i) dst[i] = static_cast<float>(wide[i]);
    return Status::Ok();
  }
  *out = Tensor::Empty(shape, dtype);
  return r->Bytes(out->raw_data(), out->nbytes(), where + "'s data");
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
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(path + ": cannot open");
  Reader r(path, &f);
  uint64_t magic = 0, reserved = 0, count = 0;
  TALLY_RETURN_IF_ERROR(r.Get(&magic, "the header"));
  if (magic != kNDArrayListMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(magic));
    return r.Bad(std::string("not an MXNet NDArray file (it begins with ") + buf + ", not 0x112)");
  }
  TALLY_RETURN_IF_ERROR(r.Get(&reserved, "the header"));
  TALLY_RETURN_IF_ERROR(r.Get(&count, "the header"));
  if (count > kMaxCount) return r.Bad("implausible array count " + std::to_string(count));
  NDArrayFile result;
  result.arrays.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    TALLY_RETURN_IF_ERROR(ReadArray(&r, "array " + std::to_string(i), &result.arrays[i].tensor));
  }
  uint64_t names = 0;
  TALLY_RETURN_IF_ERROR(r.Get(&names, "the name count"));
  if (names != 0 && names != count) {
    return r.Bad(std::to_string(names) + " names for " + std::to_string(count) + " arrays");
  }
  for (uint64_t i = 0; i < names; ++i) {
    uint64_t len = 0;
    TALLY_RETURN_IF_ERROR(r.Get(&len, "name " + std::to_string(i)));
    if (len > 4096) return r.Bad("name " + std::to_string(i) + " is " + std::to_string(len) + " bytes long");
    std::string& name = result.arrays[i].name;
    name.resize(len);
    TALLY_RETURN_IF_ERROR(r.Bytes(name.data(), len, "name " + std::to_string(i)));
  }
  if (f.peek() != std::char_traits<char>::eof()) return r.Bad("bytes after the last name");
  *out = std::move(result);
  return Status::Ok();
}

bool IsNDArrayFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t magic = 0;
  return f.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kNDArrayListMagic;
}

}  // namespace tally
