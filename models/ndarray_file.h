// MXNet's NDArray list file, the format of `mx.nd.save` / `mx.nd.load` and of MXNet's
// `PREFIX-NNNN.params` checkpoints and Gluon's saved parameters. The byte layout is in
// docs/ndarray.md:
//
//   [u64 0x112][u64 0][u64 count][count arrays][u64 count][count names: u64 length, bytes]
//
//   std::vector<NamedTensor> arrays = {{"arg:fc1_weight", w}, {"aux:bn0_moving_mean", m}};
//   Status s = WriteNDArrayFile("/tmp/m-0001.params", arrays);
//   NDArrayFile f;
//   s = ReadNDArrayFile("/tmp/m-0001.params", &f);
//   const Tensor* w2 = f.Find("arg:fc1_weight");   // nullptr when absent
//
// Written: version 2 arrays (what MXNet 1.x writes outside numpy mode), dense, context cpu(0).
// Read: versions 1, 2 and 3 (numpy-shape mode) and the legacy layout before them; dense
// arrays of float32, float16, bfloat16, uint8 and int32 (float64 arrays are read as float32,
// since some old Gluon files hold them). Every other failure of the file (missing,
// truncated, sparse storage, an unknown dtype, a name count that is not the array count)
// is a Status "PATH: byte OFFSET: FIELD: why". The file is untrusted: every count, shape
// and length is checked, without overflow, against the bytes the file still holds before
// anything of its size is allocated (docs/ndarray.md, "Limits"). Assumes a little-endian
// host, as the format is little-endian on every platform MXNet wrote it from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/safetensors.h"

namespace tally {

// The file's first 8 bytes (MXNet's kMXAPINDArrayListMagic).
constexpr uint64_t kNDArrayListMagic = 0x112;

struct NDArrayFile {
  // In the file's order; names are empty when the file holds an unnamed list.
  std::vector<NamedTensor> arrays;

  const Tensor* Find(const std::string& name) const;
};

// Writes the arrays (CPU, contiguous, Tally's dtypes) in the given order, beside `path` and
// renamed into place so that a reader never sees half a file.
Status WriteNDArrayFile(const std::string& path, const std::vector<NamedTensor>& arrays);

Status ReadNDArrayFile(const std::string& path, NDArrayFile* out);

// Whether the file begins with kNDArrayListMagic (false when it cannot be read).
bool IsNDArrayFile(const std::string& path);

}  // namespace tally
