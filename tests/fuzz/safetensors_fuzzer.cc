// libFuzzer harness: hostile safetensors files (Tally's .states, version 1 .params, export
// fixtures) through ReadSafetensors.
//
// Each input is the file's bytes, as they are (docs/fuzzing.md). Besides crashes, leaks and
// undefined behaviour, it checks that no tensor accepted holds more bytes than the file, and
// round trips: a file that reads, written again by WriteSafetensors with its metadata, reads
// back to the same tensors (names, order, dtypes, shapes, bytes) and the same metadata.
#include <cstdint>
#include <cstring>
#include <string>

#include <glog/logging.h>

#include "models/safetensors.h"
#include "tests/fuzz/fuzz_files.h"

namespace tally {
namespace fuzz {
namespace {

FuzzDir* dir;

void CheckSame(const SafetensorsFile& a, const SafetensorsFile& b) {
  CHECK(a.metadata == b.metadata) << "the metadata changed";
  CHECK_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor& x = a.tensors[i].tensor;
    const Tensor& y = b.tensors[i].tensor;
    CHECK(a.tensors[i].name == b.tensors[i].name) << "tensor " << i << "'s name changed";
    CHECK(x.dtype() == y.dtype() && x.shape() == y.shape()) << x.ToString() << " came back as " << y.ToString();
    CHECK_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "tensor " << i << "'s bytes changed";
  }
}

}  // namespace

int FuzzOneInput(const uint8_t* data, size_t size) {
  dir->Clear();
  dir->Write("in.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  SafetensorsFile f;
  if (!ReadSafetensors(dir->Path("in.safetensors"), &f).ok()) return 0;
  for (const NamedTensor& t : f.tensors) CHECK_LE(t.tensor.nbytes(), size) << t.tensor.ToString();
  CHECK(WriteSafetensors(dir->Path("again.safetensors"), f.tensors, f.metadata).ok());
  SafetensorsFile back;
  const Status s = ReadSafetensors(dir->Path("again.safetensors"), &back);
  CHECK(s.ok()) << "a file WriteSafetensors wrote does not read: " << s;
  CheckSame(f, back);
  return 0;
}

}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_logtostderr = true;
  tally::fuzz::dir = new tally::fuzz::FuzzDir("safetensors");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FuzzOneInput(data, size);
}
