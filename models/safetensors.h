// Reading and writing tensors in the safetensors format (Hugging Face's), used for test
// fixtures and for `tally export`. The byte layout is in docs/safetensors.md:
//
//   [8 bytes: header length N, little-endian u64][N bytes: JSON header][raw tensor data]
//
//   std::vector<NamedTensor> ts = {{"fc.weight", w}, {"fc.bias", b}};
//   Status s = WriteSafetensors("/tmp/model.safetensors", ts, {{"epoch", "3"}});
//   SafetensorsFile f;
//   s = ReadSafetensors("/tmp/model.safetensors", &f);
//   const Tensor* w2 = f.Find("fc.weight");   // nullptr when absent
//
// Supported dtypes: F32, F16, BF16, I32, U8 (Tally's). WriteSafetensorsRaw also writes the
// format's other dtypes (such as I64) from raw bytes; the reader refuses those. Tensors read
// are CPU tensors owned by the SafetensorsFile's copies of them. Every failure of the outside
// world (missing, truncated or malformed file, an oversized header, offsets out of range, an
// unsupported dtype, a shape whose bytes are not its data's) is a Status "PATH: byte OFFSET:
// FIELD: why"; the file is untrusted, and every length and shape is checked, without
// overflow, against the bytes it holds before anything of that size is allocated
// (docs/safetensors.md, "What the reader refuses"). The functions are thread-compatible:
// concurrent calls on different files are fine. Assumes a little-endian host, as the data is
// stored little-endian and copied as is.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tally {

// The header may be at most this long; a larger length field means a corrupt or hostile
// file, refused before anything is allocated (the same cap as the reference implementation).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// The header is padded with spaces to a multiple of this, so the data is aligned.
constexpr uint64_t kSafetensorsHeaderAlign = 8;
// The key of the optional string-to-string metadata object in the header.
constexpr char kSafetensorsMetadataKey[] = "__metadata__";

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in the order of their data in the file
  std::map<std::string, std::string> metadata;

  const Tensor* Find(const std::string& name) const;
};

// Writes the tensors (CPU, contiguous; names unique and not "__metadata__") in the given
// order. The file is written beside `path` and renamed into place, so a reader never sees
// half a file.
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// A tensor given as a safetensors dtype name and its little-endian bytes, for dtypes Tally's
// tensors do not have (`tally export` writes PyTorch's I64 num_batches_tracked this way).
struct RawNamedTensor {
  std::string name;
  std::string dtype;  // any dtype of the format: BOOL, U8, I8, U16, I16, F16, BF16, U32, I32,
                      // F32, U64, I64, F64
  Shape shape;
  std::string data;   // NumElements(shape) x the dtype's size bytes
};

// As WriteSafetensors, for raw tensors. REQUIRES: every dtype is one listed above and every
// data size matches its shape.
Status WriteSafetensorsRaw(const std::string& path, const std::vector<RawNamedTensor>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

Status ReadSafetensors(const std::string& path, SafetensorsFile* out);

// A string-to-string map as a JSON object, and back (what __metadata__ holds; a .params
// checkpoint carries its metadata the same way, docs/checkpoint.md). The parse fails on
// anything but an object of strings.
std::string StringMapToJson(const std::map<std::string, std::string>& m);
Status StringMapFromJson(const std::string& text, std::map<std::string, std::string>* m);

// "F32" etc. for Tally's dtypes; false for a name Tally does not support.
const char* SafetensorsDTypeName(DType t);
bool ParseSafetensorsDType(const std::string& name, DType* out);

}  // namespace tally
