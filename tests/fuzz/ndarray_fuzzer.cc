// libFuzzer harness: hostile MXNet NDArray files (.params) through Tally's readers.
//
// Each input is the file's bytes, as they are (docs/fuzzing.md). The harness reads it as an
// NDArray file, and as a checkpoint's .params (ReadParamsFile: Tally's metadata array, the
// names mapped back and every 4-D array reordered from NCHW to NHWC, where a shape whose
// element count wrapped once wrote past its buffer).
//
// Besides crashes, leaks and undefined behaviour, it checks that no array accepted holds
// more bytes than the file (nothing is allocated from a declared size alone), and round
// trips: a file that reads, written again by WriteNDArrayFile, reads back to the same names,
// dtypes, shapes and bytes (float64 arrays come back as the float32 they were read as).
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "models/ndarray_file.h"
#include "tests/fuzz/fuzz_files.h"
#include "worker/checkpoint.h"

namespace tally {
namespace fuzz {
namespace {

FuzzDir* dir;

bool Writable(const NDArrayFile& f) {
  for (const NamedTensor& a : f.arrays) {
    if (!a.tensor.defined() || a.tensor.ndim() == 0) return false;  // WriteNDArrayFile has no such arrays
  }
  return true;
}

void CheckSameArrays(const NDArrayFile& a, const NDArrayFile& b) {
  CHECK_EQ(a.arrays.size(), b.arrays.size());
  for (size_t i = 0; i < a.arrays.size(); ++i) {
    const Tensor& x = a.arrays[i].tensor;
    const Tensor& y = b.arrays[i].tensor;
    CHECK(a.arrays[i].name == b.arrays[i].name) << "array " << i << "'s name changed";
    CHECK(x.dtype() == y.dtype() && x.shape() == y.shape()) << x.ToString() << " came back as " << y.ToString();
    CHECK_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "array " << i << "'s bytes changed";
  }
}

}  // namespace

int FuzzOneInput(const uint8_t* data, size_t size) {
  dir->Clear();
  dir->Write("in.params", std::string_view(reinterpret_cast<const char*>(data), size));
  NDArrayFile f;
  if (ReadNDArrayFile(dir->Path("in.params"), &f).ok()) {
    for (const NamedTensor& a : f.arrays) {
      CHECK_LE(a.tensor.defined() ? a.tensor.nbytes() : 0, size) << a.tensor.ToString() << " from a file of " << size;
    }
    if (Writable(f)) {
      CHECK(WriteNDArrayFile(dir->Path("again.params"), f.arrays).ok());
      NDArrayFile back;
      const Status s = ReadNDArrayFile(dir->Path("again.params"), &back);
      CHECK(s.ok()) << "a file WriteNDArrayFile wrote does not read: " << s;
      CheckSameArrays(f, back);
    }
  }
  std::vector<NamedTensor> params;
  std::map<std::string, std::string> metadata;
  bool foreign = false;
  (void)ReadParamsFile(dir->Path("in.params"), &params, &metadata, &foreign);
  return 0;
}

}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_logtostderr = true;
  tally::fuzz::dir = new tally::fuzz::FuzzDir("ndarray");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FuzzOneInput(data, size);
}
