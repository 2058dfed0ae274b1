#include "models/safetensors.h"

#include "models/atomic_file.h"
#include "models/file_sizes.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace tally {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

// A strict reader for the subset of JSON a safetensors header uses: objects, arrays,
// strings and non-negative integers; other values are parsed only to be skipped.
class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == s_.size();
  }
  size_t pos() const { return pos_; }

  bool String(std::string* out) {
    if (!Consume('"')) return false;
    out->clear();
    while (pos_ < s_.size()) {
      unsigned char c = s_[pos_++];
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            uint32_t lo;
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') return false;
            pos_ += 2;
            if (!Hex4(&lo) || lo < 0xDC00 || lo >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return false;
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool Uint(uint64_t* out) {
    SkipSpace();
    size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t digit = s_[pos_++] - '0';
      if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
      v = v * 10 + digit;
    }
    *out = v;
    return pos_ > start;
  }

  // An array of at most max_size non-negative integers.
  bool UintArray(std::vector<uint64_t>* out, size_t max_size) {
    out->clear();
    if (!Consume('[')) return false;
    if (Consume(']')) return true;
    do {
      uint64_t v;
      if (out->size() == max_size || !Uint(&v)) return false;
      out->push_back(v);
    } while (Consume(','));
    return Consume(']');
  }

  bool SkipValue(int depth = 0) {
    if (depth > 32) return false;
    SkipSpace();
    if (pos_ >= s_.size()) return false;
    std::string unused;
    char c = s_[pos_];
    if (c == '"') return String(&unused);
    if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++pos_;
      if (Consume(close)) return true;
      do {
        if (c == '{' && !(String(&unused) && Consume(':'))) return false;
        if (!SkipValue(depth + 1)) return false;
      } while (Consume(','));
      return Consume(close);
    }
    size_t start = pos_;
    while (pos_ < s_.size() && std::strchr("+-.0123456789eEtruefalsn", s_[pos_])) ++pos_;
    return pos_ > start;
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_]) && s_[pos_] != '\0') ++pos_;
  }
  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return false;
    *out = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
            : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (v < 0) return false;
      *out = *out * 16 + v;
    }
    return true;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
};

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// {"k": "v", ...} into *m.
bool ParseStringMap(JsonReader* r, std::map<std::string, std::string>* m) {
  if (!r->Consume('{')) return false;
  if (r->Consume('}')) return true;
  do {
    std::string k, v;
    if (!r->String(&k) || !r->Consume(':') || !r->String(&v)) return false;
    (*m)[k] = v;
  } while (r->Consume(','));
  return r->Consume('}');
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  // File offsets of its object, its shape and its data_offsets in the header, for errors.
  uint64_t at, shape_at, offsets_at;
};

// The header's first byte in the file (after its length): positions in the header are
// reported from the file's start.
constexpr uint64_t kHeaderOffset = 8;
// More dimensions than this is a corrupt or hostile header (NumPy's own limit is 64), refused
// before a long list of them is kept.
constexpr size_t kMaxDims = 64;
constexpr uint64_t kMaxDim = uint64_t{1} << 40;

// Parses one tensor's {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, which begins
// at file offset e->at. Errors name the file offset of the field's value.
Status ParseEntry(JsonReader* r, const std::string& path, Entry* e) {
  auto bad = [&](uint64_t at, const std::string& field, const std::string& why) {
    return Status::InvalidArgument(path + ": byte " + std::to_string(at) + ": tensor '" + e->name + "' " + field +
                                   ": " + why);
  };
  bool have_dtype = false, have_shape = false, have_offsets = false;
  if (!r->Consume('{')) return bad(e->at, "its value", "expected an object");
  if (!r->Consume('}')) {
    do {
      std::string key;
      if (!r->String(&key) || !r->Consume(':')) return bad(kHeaderOffset + r->pos(), "a key", "malformed JSON");
      const uint64_t value_at = kHeaderOffset + r->pos();
      if (key == "dtype") {
        std::string name;
        if (!r->String(&name)) return bad(value_at, "dtype", "not a string");
        if (!ParseSafetensorsDType(name, &e->dtype)) {
          return bad(value_at, "dtype", "unsupported dtype '" + name + "' (Tally reads F32, F16, BF16, I32, U8)");
        }
        have_dtype = true;
      } else if (key == "shape" || key == "data_offsets") {
        std::vector<uint64_t> v;
        if (!r->UintArray(&v, kMaxDims)) return bad(value_at, key, "not a list of at most 64 integers");
        if (key == "shape") {
          for (uint64_t d : v) {
            if (d > kMaxDim) return bad(value_at, "shape", "dimension " + std::to_string(d) + " is above 2^40");
            e->shape.push_back(static_cast<int64_t>(d));
          }
          e->shape_at = value_at;
          have_shape = true;
        } else {
          if (v.size() != 2 || v[0] > v[1]) {
            return bad(value_at, "data_offsets", "must be [begin, end] with begin <= end");
          }
          e->begin = v[0];
          e->end = v[1];
          e->offsets_at = value_at;
          have_offsets = true;
        }
      } else if (!r->SkipValue()) {
        return bad(value_at, "'" + key + "'", "malformed JSON");
      }
    } while (r->Consume(','));
    if (!r->Consume('}')) return bad(kHeaderOffset + r->pos(), "its object", "malformed JSON");
  }
  if (!have_dtype || !have_shape || !have_offsets) return bad(e->at, "its object", "needs dtype, shape and data_offsets");
  return Status::Ok();
}

Status ParseHeader(const std::string& path, const std::string& header, std::vector<Entry>* entries,
                   std::map<std::string, std::string>* metadata) {
  JsonReader r(header);
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(path + ": byte " + std::to_string(kHeaderOffset + r.pos()) + ": the header: " + what);
  };
  if (!r.Consume('{')) return bad("expected a JSON object");
  std::set<std::string> seen;
  if (!r.Consume('}')) {
    do {
      std::string name;
      if (!r.String(&name) || !r.Consume(':')) return bad("malformed JSON");
      if (!seen.insert(name).second) return bad("duplicate key '" + name + "'");
      if (name == kSafetensorsMetadataKey) {
        if (!ParseStringMap(&r, metadata)) return bad("__metadata__ must map strings to strings");
        continue;
      }
      Entry e;
      e.name = name;
      e.at = kHeaderOffset + r.pos();
      TALLY_RETURN_IF_ERROR(ParseEntry(&r, path, &e));
      entries->push_back(std::move(e));
    } while (r.Consume(','));
    if (!r.Consume('}')) return bad("malformed JSON");
  }
  if (!r.AtEnd()) return bad("trailing bytes after the JSON object");
  return Status::Ok();
}

// One tensor to write, viewed: nothing here is owned.
struct OutTensor {
  const std::string* name;
  const char* dtype;  // the safetensors name
  const Shape* shape;
  const void* data;
  uint64_t bytes;
};

// The element size of each dtype the format defines; 0 for another name.
uint64_t RawDTypeSize(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"U16", 2}, {"I16", 2}, {"F16", 2}, {"BF16", 2},
      {"U32", 4},  {"I32", 4}, {"F32", 4}, {"U64", 8}, {"I64", 8}, {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

Status WriteTensors(const std::string& path, const std::vector<OutTensor>& tensors,
                    const std::map<std::string, std::string>& metadata) {
  std::ostringstream h;
  h << '{';
  bool first = true;
  if (!metadata.empty()) {
    h << JsonQuote(kSafetensorsMetadataKey) << ':' << StringMapToJson(metadata);
    first = false;
  }
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const OutTensor& t : tensors) {
    CHECK(*t.name != kSafetensorsMetadataKey && names.insert(*t.name).second)
        << "tensor name '" << *t.name << "' is reserved or repeated";
    h << (first ? "" : ",") << JsonQuote(*t.name) << ":{\"dtype\":\"" << t.dtype
      << "\",\"shape\":[";
    for (size_t i = 0; i < t.shape->size(); ++i) h << (i ? "," : "") << (*t.shape)[i];
    h << "],\"data_offsets\":[" << offset << ',' << offset + t.bytes << "]}";
    offset += t.bytes;
    first = false;
  }
  h << '}';
  std::string header = h.str();
  header.append((kSafetensorsHeaderAlign - header.size() % kSafetensorsHeaderAlign) %
                    kSafetensorsHeaderAlign, ' ');
  if (header.size() > kSafetensorsMaxHeaderBytes) {
    return Status::InvalidArgument(path + ": safetensors header would exceed the size cap");
  }

  return WriteFileAtomically(path, [&](std::ostream& f) {
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), sizeof(n));
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const OutTensor& t : tensors) f.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
  });
}

}  // namespace

std::string StringMapToJson(const std::map<std::string, std::string>& m) {
  std::string out = "{";
  for (const auto& [k, v] : m) out += (out.size() > 1 ? "," : "") + JsonQuote(k) + ':' + JsonQuote(v);
  return out + "}";
}

Status StringMapFromJson(const std::string& text, std::map<std::string, std::string>* m) {
  JsonReader r(text);
  std::map<std::string, std::string> result;
  if (!ParseStringMap(&r, &result) || !r.AtEnd()) {
    return Status::InvalidArgument("not a JSON object of strings at byte " + std::to_string(r.pos()));
  }
  *m = std::move(result);
  return Status::Ok();
}

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
  }
  return "?";
}

bool ParseSafetensorsDType(const std::string& name, DType* out) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    if (name == SafetensorsDTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

const Tensor* SafetensorsFile::Find(const std::string& name) const {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return &t.tensor;
  }
  return nullptr;
}

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<OutTensor> out;
  for (const NamedTensor& t : tensors) {
    CHECK(t.tensor.defined() && t.tensor.device().is_cpu()) << t.name << ": not a CPU tensor";
    out.push_back({&t.name, SafetensorsDTypeName(t.tensor.dtype()), &t.tensor.shape(),
                   t.tensor.raw_data(), t.tensor.nbytes()});
  }
  return WriteTensors(path, out, metadata);
}

Status WriteSafetensorsRaw(const std::string& path, const std::vector<RawNamedTensor>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<OutTensor> out;
  for (const RawNamedTensor& t : tensors) {
    uint64_t size = RawDTypeSize(t.dtype);
    CHECK(size != 0) << t.name << ": '" << t.dtype << "' is not a safetensors dtype";
    CHECK_EQ(t.data.size(), size * NumElements(t.shape))
        << t.name << ": data size does not match " << t.dtype << ShapeString(t.shape);
    out.push_back({&t.name, t.dtype.c_str(), &t.shape, t.data.data(), t.data.size()});
  }
  return WriteTensors(path, out, metadata);
}

namespace {

// Checks that the entries' data cover the data section exactly, tensor after tensor, with no
// gap or overlap, each holding its shape's bytes; sorts them by offset. Errors name the file
// offset of the field at fault in the header.
Status CheckDataOffsets(const std::string& path, uint64_t data_start, uint64_t data_size,
                        std::vector<Entry>* entries) {
  std::sort(entries->begin(), entries->end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& e : *entries) {
    auto bad = [&](const std::string& field, const std::string& why) {
      const uint64_t at = field == "shape" ? e.shape_at : e.offsets_at;
      return Status::InvalidArgument(path + ": byte " + std::to_string(at) + ": tensor '" + e.name + "' " + field +
                                     ": " + why);
    };
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.end > data_size) {
      return bad("data_offsets", range + " out of range of the " + std::to_string(data_size) +
                                     " data bytes from byte " + std::to_string(data_start) + " (truncated?)");
    }
    if (e.begin != expected) {
      return bad("data_offsets", range + " leaves a gap or overlap at data byte " + std::to_string(expected));
    }
    uint64_t bytes = 0;
    if (!ShapeBytes(e.shape, DTypeSize(e.dtype), &bytes)) {
      return bad("shape", ShapeString(e.shape) + " has more elements than a tensor can hold (the product of "
                          "the dimensions overflows 64 bits)");
    }
    if (bytes != e.end - e.begin) {
      return bad("shape", ShapeString(e.shape) + " of " + SafetensorsDTypeName(e.dtype) + " is " +
                              std::to_string(bytes) + " bytes, its data_offsets " + range + " hold " +
                              std::to_string(e.end - e.begin));
    }
    expected = e.end;
  }
  if (expected != data_size) {
    return Status::InvalidArgument(path + ": byte " + std::to_string(data_start + expected) + ": the data: " +
                                   std::to_string(data_size - expected) + " bytes after the last tensor");
  }
  return Status::Ok();
}

}  // namespace

Status ReadSafetensors(const std::string& path, SafetensorsFile* out) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::NotFound(path + ": cannot open");
  const std::streamoff size = f.tellg();
  if (size < 0 || !f.seekg(0)) return Status::IoError(path + ": cannot find its size");
  const uint64_t file_size = static_cast<uint64_t>(size);
  uint64_t header_len = 0;
  if (file_size < 8 || !f.read(reinterpret_cast<char*>(&header_len), 8)) {
    return Status::InvalidArgument(path + ": byte 0: the header length: truncated: the file has " +
                                   std::to_string(file_size) + " of its 8 bytes");
  }
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return Status::InvalidArgument(path + ": byte 0: the header length: " + std::to_string(header_len) +
                                   " exceeds the cap of " + std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  }
  if (header_len > file_size - 8) {
    return Status::InvalidArgument(path + ": byte 0: the header length: truncated: " + std::to_string(header_len) +
                                   " bytes, but only " + std::to_string(file_size - 8) + " follow");
  }
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return Status::IoError(path + ": byte 8: the header: read failed");

  std::vector<Entry> entries;
  SafetensorsFile result;
  TALLY_RETURN_IF_ERROR(ParseHeader(path, header, &entries, &result.metadata));
  const uint64_t data_start = kHeaderOffset + header_len;
  TALLY_RETURN_IF_ERROR(CheckDataOffsets(path, data_start, file_size - data_start, &entries));
  for (const Entry& e : entries) {
    Tensor t = Tensor::Empty(e.shape, e.dtype);
    if (!f.read(static_cast<char*>(t.raw_data()), e.end - e.begin)) {
      return Status::IoError(path + ": byte " + std::to_string(data_start + e.begin) + ": tensor '" + e.name +
                             "' data: read failed");
    }
    result.tensors.push_back({e.name, t});
  }
  *out = std::move(result);
  return Status::Ok();
}

}  // namespace tally
