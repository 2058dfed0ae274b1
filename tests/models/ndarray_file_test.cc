// MXNet's NDArray list file (models/ndarray_file.h): byte-exact against what MXNet 1.9.1
// writes, the older layouts it reads, and the errors for damaged files.
#include "models/ndarray_file.h"

#include <cstring>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "base/dtype.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

std::string TempPath(const std::string& name) {
  static ScopedTempDir dir("ndarray_file_test");
  return dir.Path(name);
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// mx.nd.save(f, {'arg:w': mx.nd.array([[1, 2], [3, 4]]), 'aux:m': mx.nd.array([1.5], dtype='float16')})
// as MXNet 1.9.1 wrote it (xxd of the file).
const char kMxnetFile[] =
    "1201000000000000" "0000000000000000" "0200000000000000"            // magic, reserved, 2 arrays
    "c9fa93f9" "00000000" "02000000" "0200000000000000" "0200000000000000"  // v2, dense, [2, 2]
    "01000000" "00000000" "00000000" "0000803f000000400000404000008040"     // cpu(0), float32, data
    "c9fa93f9" "00000000" "01000000" "0100000000000000"                     // v2, dense, [1]
    "01000000" "00000000" "02000000" "003e"                                 // cpu(0), float16, 1.5
    "0200000000000000" "0500000000000000" "6172673a77" "0500000000000000" "6175783a6d";  // names

std::vector<NamedTensor> MxnetFileArrays() {
  Tensor w = Tensor::Empty({2, 2}, DType::kF32);
  for (int i = 0; i < 4; ++i) w.data<float>()[i] = static_cast<float>(i + 1);
  Tensor m = Tensor::Empty({1}, DType::kF16);
  m.data<uint16_t>()[0] = FloatToHalf(1.5f);
  return {{"arg:w", w}, {"aux:m", m}};
}

TEST(NDArrayFile, WritesExactlyWhatMxnetWrites) {
  const std::string path = TempPath("written.params");
  ASSERT_TRUE(WriteNDArrayFile(path, MxnetFileArrays()).ok());
  EXPECT_EQ(ReadAll(path), FromHex(kMxnetFile));
  EXPECT_TRUE(IsNDArrayFile(path));
}

TEST(NDArrayFile, ReadsMxnetsFile) {
  const std::string path = TempPath("mxnet.params");
  WriteBytes(path, FromHex(kMxnetFile));
  NDArrayFile f;
  Status s = ReadNDArrayFile(path, &f);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(f.arrays.size(), 2u);
  const Tensor* w = f.Find("arg:w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape(), (Shape{2, 2}));
  EXPECT_EQ(w->data<float>()[3], 4.0f);
  const Tensor* m = f.Find("aux:m");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dtype(), DType::kF16);
  EXPECT_EQ(HalfToFloat(m->data<uint16_t>()[0]), 1.5f);
  EXPECT_EQ(f.Find("arg:nothing"), nullptr);
}

TEST(NDArrayFile, RoundTripsEveryDtype) {
  std::vector<NamedTensor> arrays;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    Tensor x = Tensor::Empty({3, 1, 2}, t);
    for (size_t b = 0; b < x.nbytes(); ++b) static_cast<uint8_t*>(x.raw_data())[b] = static_cast<uint8_t>(b * 7 + 1);
    arrays.push_back({std::string("x_") + DTypeName(t), x});
  }
  const std::string path = TempPath("dtypes.params");
  ASSERT_TRUE(WriteNDArrayFile(path, arrays).ok());
  NDArrayFile f;
  ASSERT_TRUE(ReadNDArrayFile(path, &f).ok());
  ASSERT_EQ(f.arrays.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(f.arrays[i].name, arrays[i].name);
    EXPECT_EQ(f.arrays[i].tensor.dtype(), arrays[i].tensor.dtype());
    EXPECT_EQ(f.arrays[i].tensor.shape(), arrays[i].tensor.shape());
    EXPECT_EQ(std::memcmp(f.arrays[i].tensor.raw_data(), arrays[i].tensor.raw_data(), arrays[i].tensor.nbytes()), 0);
  }
}

// The layouts before version 2: version 1 (no storage type) and the legacy one (u32 dims,
// the first u32 being the dimension count), and version 3's scalar; float64 reads as float32.
TEST(NDArrayFile, ReadsOlderLayoutsAndFloat64) {
  const std::string head = "1201000000000000" "0000000000000000" "0300000000000000";
  const std::string v1 = "c8fa93f9" "01000000" "0200000000000000" "01000000" "00000000" "00000000"
                         "0000803f00000040";                      // v1, [2] float32 1, 2
  const std::string legacy = "01000000" "01000000" "01000000" "00000000" "01000000"
                             "000000000000f83f";                  // legacy, [1] float64 1.5
  const std::string v3 = "cafa93f9" "00000000" "00000000" "01000000" "00000000" "04000000"
                         "07000000";                              // v3 scalar int32 7
  const std::string path = TempPath("old.params");
  WriteBytes(path, FromHex(head + v1 + legacy + v3 + "0000000000000000"));
  NDArrayFile f;
  Status s = ReadNDArrayFile(path, &f);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(f.arrays.size(), 3u);
  EXPECT_EQ(f.arrays[0].tensor.data<float>()[1], 2.0f);
  EXPECT_EQ(f.arrays[1].tensor.dtype(), DType::kF32);
  EXPECT_EQ(f.arrays[1].tensor.data<float>()[0], 1.5f);
  EXPECT_EQ(f.arrays[2].tensor.shape(), Shape{});
  EXPECT_EQ(f.arrays[2].tensor.data<int32_t>()[0], 7);
  EXPECT_TRUE(f.arrays[0].name.empty());  // an unnamed list
}

Status ReadHex(const std::string& name, const std::string& hex) {
  const std::string path = TempPath(name);
  WriteBytes(path, FromHex(hex));
  NDArrayFile f;
  return ReadNDArrayFile(path, &f);
}

TEST(NDArrayFile, DamagedFilesAreRefusedNamingFileOffsetAndField) {
  const std::string good = kMxnetFile;
  Status s = ReadHex("truncated.params", good.substr(0, good.size() - 2 * 36));
  EXPECT_NE(s.message().find("truncated.params: byte 112: array 1's data: truncated"), std::string::npos) << s;
  s = ReadHex("safetensors.params", "0800000000000000" "7b7d202020202020");
  EXPECT_NE(s.message().find("safetensors.params: byte 0: the magic: not an MXNet NDArray file (it begins with 0x8"), std::string::npos) << s;
  // Sparse storage (row_sparse = 1) in array 0.
  std::string sparse = good;
  sparse.replace(2 * 28, 8, "01000000");
  s = ReadHex("sparse.params", sparse);
  EXPECT_NE(s.message().find("sparse.params: byte 28: array 0's storage type: sparse storage (type 1)"), std::string::npos) << s;
  // int64 (type flag 6) in array 0.
  std::string int64 = good;
  int64.replace(2 * (24 + 12 + 16 + 8), 8, "06000000");
  s = ReadHex("int64.params", int64);
  EXPECT_NE(s.message().find("int64.params: byte 60: array 0's type flag: int64"), std::string::npos) << s;
  s = ReadHex("extra.params", good + "00");
  EXPECT_NE(s.message().find("extra.params: byte 148: the end: 1 bytes after the last name"), std::string::npos) << s;
  NDArrayFile f;
  EXPECT_EQ(ReadNDArrayFile(TempPath("absent.params"), &f).code(), Status::Code::kNotFound);
  EXPECT_FALSE(IsNDArrayFile(TempPath("absent.params")));
}

}  // namespace
}  // namespace tally
