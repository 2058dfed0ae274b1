// Crafted files against the readers of NDArray .params, safetensors and checkpoints
// (docs/security.md's hostile files): each is refused with a Status naming the file, the
// byte offset and the field, before anything of a size it declares is allocated, and the
// commands that read such files (`tally export`, `tally predict`) exit with that error.
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/ndarray_file.h"
#include "models/safetensors.h"
#include "tests/temp_dir.h"
#include "worker/checkpoint.h"

namespace tally {
namespace {

std::string TempPath(const std::string& name) {
  static ScopedTempDir dir("hostile_files_test");
  return dir.Path(name);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Little-endian fields, appended.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    s_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& Raw(const std::string& bytes) {
    s_ += bytes;
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

constexpr uint32_t kV2 = 0xF993FAC9;
constexpr int64_t k2To20 = int64_t{1} << 20, k2To40 = int64_t{1} << 40;

// A version 2 array header: dense, the shape, cpu(0), type flag.
void PutArrayHeader(Bytes* b, const std::vector<int64_t>& shape, int32_t flag) {
  b->Put<uint32_t>(kV2).Put<int32_t>(0).Put<int32_t>(static_cast<int32_t>(shape.size()));
  for (int64_t d : shape) b->Put<int64_t>(d);
  b->Put<int32_t>(1).Put<int32_t>(0).Put<int32_t>(flag);
}

// The 255-byte .params of the report: a Tally checkpoint whose conv0 weight is float32
// [16, 2^20+1, 2^40-2^20+1, 1]. Each dimension is under the 2^40 cap, but their product is
// 2^64 + 16, which wraps to 16 elements: 64 bytes were allocated and read, and the NCHW to
// NHWC reorder (every reader of a checkpoint does it) wrote 2^64 elements past them.
std::string WrappingParams() {
  const std::string meta = "{\"format\":\"tally-params\"}";
  Bytes b;
  b.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(2);
  PutArrayHeader(&b, {16, k2To20 + 1, k2To40 - k2To20 + 1, 1}, 0);  // at byte 24; ndim at 32
  b.Raw(std::string(64, '\x01'));
  PutArrayHeader(&b, {static_cast<int64_t>(meta.size())}, 3);
  b.Raw(meta);
  b.Put<uint64_t>(2);
  for (const std::string name : {"arg:conv0_weight", "tally:metadata"}) b.Put<uint64_t>(name.size()).Raw(name);
  return b.str();
}

// 24 bytes: the header alone, declaring 2^24 arrays (the old cap), which were allocated
// (about 1.5 GB of empty entries) before the first was found missing.
std::string CountBomb() { return Bytes().Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1 << 24).str(); }

Status ReadNDArray(const std::string& name, const std::string& bytes) {
  WriteBytes(TempPath(name), bytes);
  NDArrayFile f;
  return ReadNDArrayFile(TempPath(name), &f);
}

// The refusal names the file, the byte offset and the field (and says why).
void ExpectRefused(const Status& s, const std::string& name, uint64_t offset, const std::string& field,
                   const std::string& why = "") {
  ASSERT_FALSE(s.ok()) << name << " was accepted";
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  const std::string where = TempPath(name) + ": byte " + std::to_string(offset) + ": " + field;
  EXPECT_NE(s.message().find(where), std::string::npos) << s << "\n  lacks: " << where;
  EXPECT_NE(s.message().find(why), std::string::npos) << s << "\n  lacks: " << why;
}

// The process's peak resident memory, in MB.
long PeakRssMb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

TEST(HostileParams, ShapeWhoseProductWrapsIsRefused) {
  const std::string bytes = WrappingParams();
  ASSERT_EQ(bytes.size(), 255u);
  ExpectRefused(ReadNDArray("wrap.params", bytes), "wrap.params", 32, "array 0's shape",
                "[16,1048577,1099510579201,1] has more elements than a tensor can hold");
  // As a checkpoint's .params, which is where the reorder ran.
  std::vector<NamedTensor> params;
  std::map<std::string, std::string> meta;
  bool foreign = false;
  ExpectRefused(ReadParamsFile(TempPath("wrap.params"), &params, &meta, &foreign), "wrap.params", 32,
                "array 0's shape");
}

TEST(HostileParams, ZeroElementsWithHugeDimensionsAreRefused) {
  // No element, so no byte to read, but NchwToNhwc's strides multiply the other dimensions.
  Bytes b;
  b.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1);
  PutArrayHeader(&b, {0, k2To40, k2To40, k2To40}, 0);
  b.Put<uint64_t>(0);
  ExpectRefused(ReadNDArray("empty_huge.params", b.str()), "empty_huge.params", 32, "array 0's shape",
                "more elements than a tensor can hold");
}

TEST(HostileParams, CountBeyondTheFileIsRefusedBeforeAllocating) {
  const long before = PeakRssMb();
  ExpectRefused(ReadNDArray("count.params", CountBomb()), "count.params", 16, "the array count",
                "16777216 arrays, but the 0 bytes after it");
  // A count the cap allows, in a file too small for it.
  ExpectRefused(ReadNDArray("count2.params", Bytes().Raw(CountBomb().substr(0, 16)).Put<uint64_t>(1000).Raw(
                                                 std::string(100, '\0')).str()),
                "count2.params", 16, "the array count", "1000 arrays, but the 100 bytes after it hold at most 23");
  EXPECT_LT(PeakRssMb() - before, 200) << "the count was allocated before it was checked";
}

TEST(HostileParams, DataLargerThanTheFileIsRefusedBeforeAllocating) {
  const long before = PeakRssMb();
  for (int32_t flag : {0, 1}) {  // float32, and float64 (read through a buffer of doubles)
    Bytes b;
    b.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1);
    PutArrayHeader(&b, {k2To40, k2To20 / 2}, flag);  // 2^59 elements: no wrap, 2 or 4 EiB
    b.Raw(std::string(16, '\0'));
    const std::string name = "big" + std::to_string(flag) + ".params";
    ExpectRefused(ReadNDArray(name, b.str()), name, 24 + 12 + 16 + 12, "array 0's data",
                  "truncated: " + std::string(flag ? "float64" : "float32") + "[1099511627776,524288] needs " +
                      std::to_string(uint64_t{1} << (flag ? 62 : 61)) + " bytes, the file has 16 left");
  }
  EXPECT_LT(PeakRssMb() - before, 200);
}

TEST(HostileParams, TruncatedAndOversizedFieldsNameTheirOffset) {
  Bytes one;
  one.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1);
  PutArrayHeader(&one, {2}, 0);
  one.Raw(std::string(8, '\0'));  // ends at 24 + 32 + 8 = 64
  const std::string good = Bytes(one).Put<uint64_t>(1).Put<uint64_t>(1).Raw("w").str();
  ASSERT_TRUE(ReadNDArray("good.params", good).ok());
  ExpectRefused(ReadNDArray("cut_header.params", good.substr(0, 20)), "cut_header.params", 16, "the array count",
                "truncated: needs 8 bytes, the file has 4 left");
  ExpectRefused(ReadNDArray("cut_dim.params", good.substr(0, 40)), "cut_dim.params", 36, "array 0's dimension 0",
                "truncated");
  ExpectRefused(ReadNDArray("cut_data.params", good.substr(0, 60)), "cut_data.params", 56, "array 0's data",
                "needs 8 bytes, the file has 4 left");
  ExpectRefused(ReadNDArray("cut_names.params", good.substr(0, 66)), "cut_names.params", 64, "the name count");
  // A name length past what is left, and past the cap.
  ExpectRefused(ReadNDArray("long_name.params", Bytes(one).Put<uint64_t>(1).Put<uint64_t>(5).Raw("w").str()),
                "long_name.params", 72, "name 0's length", "5 bytes");
  ExpectRefused(ReadNDArray("huge_name.params", Bytes(one).Put<uint64_t>(1).Put<uint64_t>(~uint64_t{0}).str()),
                "huge_name.params", 72, "name 0's length", "18446744073709551615 bytes");
  // Too many dimensions, a negative one, and one over the cap.
  Bytes dims = Bytes().Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1);
  dims.Put<uint32_t>(kV2).Put<int32_t>(0).Put<int32_t>(33);
  ExpectRefused(ReadNDArray("ndim.params", dims.str()), "ndim.params", 32, "array 0's ndim", "33");
  Bytes negative;
  negative.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1);
  PutArrayHeader(&negative, {3, -2}, 0);
  ExpectRefused(ReadNDArray("negative.params", negative.str()), "negative.params", 44, "array 0's dimension 1",
                "bad dimension -2");
  Bytes over;
  over.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1);
  PutArrayHeader(&over, {k2To40 + 1}, 0);
  ExpectRefused(ReadNDArray("over.params", over.str()), "over.params", 36, "array 0's dimension 0");
}

// The legacy layout's u32 dimensions wrap the same way: 32 of 2^32 - 1.
TEST(HostileParams, LegacyDimensionsWhoseProductWrapsAreRefused) {
  Bytes b;
  b.Put<uint64_t>(0x112).Put<uint64_t>(0).Put<uint64_t>(1).Put<uint32_t>(32);
  for (int i = 0; i < 32; ++i) b.Put<uint32_t>(0xFFFFFFFFu);
  b.Put<int32_t>(1).Put<int32_t>(0).Put<int32_t>(3).Raw(std::string(64, '\0'));
  ExpectRefused(ReadNDArray("legacy.params", b.str()), "legacy.params", 24, "array 0's shape",
                "more elements than a tensor can hold");
}

// ---- safetensors (and so .states) ---------------------------------------------------------

std::string Safetensors(const std::string& header, size_t data_bytes) {
  return Bytes().Put<uint64_t>(header.size()).Raw(header).Raw(std::string(data_bytes, '\0')).str();
}

Status ReadSt(const std::string& name, const std::string& bytes) {
  WriteBytes(TempPath(name), bytes);
  SafetensorsFile f;
  return ReadSafetensors(TempPath(name), &f);
}

TEST(HostileSafetensors, ShapesAndOffsetsAreCheckedAgainstTheData) {
  auto one = [](const std::string& shape, const std::string& offsets) {
    return "{\"t\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}";
  };
  // No element, so 0 data bytes match, but the dimensions' product passes 2^64.
  ExpectRefused(ReadSt("zero_huge.st", Safetensors(one("[0,1099511627776,1099511627776]", "[0,0]"), 0)),
                "zero_huge.st", 36, "tensor 't' shape", "more elements than a tensor can hold");
  // (2^32+1)(2^32-1) elements of 4 bytes: 2^66 - 4 bytes, which wraps to 2^64 - 4.
  ExpectRefused(ReadSt("wrap.st", Safetensors(one("[4294967297,4294967295]", "[0,4]"), 4)), "wrap.st", 36,
                "tensor 't' shape", "more elements than a tensor can hold");
  ExpectRefused(ReadSt("end.st", Safetensors(one("[1]", "[0,18446744073709551615]"), 4)), "end.st", 55,
                "tensor 't' data_offsets", "out of range of the 4 data bytes");
  std::string dims = "[";
  for (int i = 0; i < 65; ++i) dims += i ? ",1" : "1";
  ExpectRefused(ReadSt("dims.st", Safetensors(one(dims + "]", "[0,4]"), 4)), "dims.st", 36, "tensor 't' shape",
                "not a list of at most 64 integers");
  ExpectRefused(ReadSt("dim.st", Safetensors(one("[1099511627777]", "[0,4]"), 4)), "dim.st", 36, "tensor 't' shape",
                "above 2^40");
}

TEST(HostileSafetensors, HeaderLengthsAreCheckedBeforeAllocating) {
  const long before = PeakRssMb();
  ExpectRefused(ReadSt("len.st", Bytes().Put<uint64_t>(uint64_t{1} << 63).Raw("{}").str()), "len.st", 0,
                "the header length", "9223372036854775808 exceeds the cap");
  ExpectRefused(ReadSt("len2.st", Bytes().Put<uint64_t>(90'000'000).Raw("{}").str()), "len2.st", 0,
                "the header length", "truncated: 90000000 bytes, but only 2 follow");
  ExpectRefused(ReadSt("len3.st", "\x02"), "len3.st", 0, "the header length", "the file has 1 of its 8 bytes");
  EXPECT_LT(PeakRssMb() - before, 50);
}

// ---- checkpoints: the .params/.states pair and their metadata ----------------------------

TEST(HostileCheckpoint, DamagedStatesAndMetadataAreRefused) {
  ScopedTempDir dir("hostile_checkpoint");
  const std::string prefix = dir.Path("m");
  Checkpoint c;
  c.epoch = 2;
  c.params = {{"fc.bias", Tensor::Zeros({3}, DType::kF32)}};
  c.states = {{"fc.bias", Tensor::Zeros({3}, DType::kF32)}};
  ASSERT_TRUE(SaveCheckpoint(prefix, c).ok());
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(prefix, 2, &back).ok());

  // A .states cut inside its data: named with its offset, and no .prev to fall back on.
  const std::string states = CheckpointPath(prefix, 2, ".states");
  std::ifstream in(states, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  WriteBytes(states, bytes.substr(0, bytes.size() - 4));
  Status s = LoadCheckpoint(prefix, 2, &back);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(states + ": byte "), std::string::npos) << s;
  EXPECT_NE(s.message().find("tensor 'fc.bias' data_offsets: [0, 12] out of range"), std::string::npos) << s;

  // Metadata counts that are negative or past 63 bits.
  for (const char* batch : {"-5", "99999999999999999999", "+1", " 1"}) {
    ASSERT_TRUE(SaveCheckpoint(prefix, c).ok());
    NDArrayFile f;
    const std::string params = CheckpointPath(prefix, 2, ".params");
    ASSERT_TRUE(ReadNDArrayFile(params, &f).ok());
    Tensor* meta = &f.arrays.back().tensor;
    std::string json(static_cast<const char*>(meta->raw_data()), meta->nbytes());
    const size_t at = json.find("\"batch\":\"0\"");
    ASSERT_NE(at, std::string::npos) << json;
    json.replace(at, 11, std::string("\"batch\":\"") + batch + "\"");
    f.arrays.back().tensor = Tensor::Empty({static_cast<int64_t>(json.size())}, DType::kU8);
    std::memcpy(f.arrays.back().tensor.raw_data(), json.data(), json.size());
    ASSERT_TRUE(WriteNDArrayFile(params, f.arrays).ok());
    s = LoadCheckpoint(prefix, 2, &back);
    ASSERT_FALSE(s.ok()) << batch << " was taken as a batch";
    EXPECT_NE(s.message().find(params + ": metadata 'batch' is '" + batch + "', not a non-negative integer"),
              std::string::npos)
        << s;
  }
}

#ifdef TALLY_BINARY
// ---- the commands that read such files -----------------------------------------------------

struct Run {
  int exit_code;  // -1: killed by a signal, or not run
  std::string output;
};

Run Tally(const std::string& args) {
  const char* env = std::getenv("TALLY_BINARY");
  const std::string cmd = std::string(env && *env ? env : TALLY_BINARY) + " " + args + " 2>&1";
  Run r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void ExpectCleanRefusal(const Run& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const std::string& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << r.output << "\n  lacks: " << p;
  for (const char* crash : {"Check failed", "Sanitizer", "terminate", "Segmentation", "Aborted"}) {
    EXPECT_EQ(r.output.find(crash), std::string::npos) << r.output;
  }
}

// A Tally .params with one tiny array whose metadata claims `classes` classes.
std::string ParamsClaiming(const std::string& name, const std::string& classes) {
  const std::string json = "{\"format\":\"tally-params\",\"version\":\"2\",\"network\":\"resnet\",\"num_layers\":"
                           "\"18\",\"num_classes\":\"" + classes + "\",\"image_shape\":\"3,32,32\",\"step\":\"0\"}";
  Tensor meta = Tensor::Empty({static_cast<int64_t>(json.size())}, DType::kU8);
  std::memcpy(meta.raw_data(), json.data(), json.size());
  EXPECT_TRUE(WriteNDArrayFile(TempPath(name), {{"arg:fc1_bias", Tensor::Zeros({4}, DType::kF32)},
                                               {"tally:metadata", meta}}).ok());
  return TempPath(name);
}

TEST(HostileFilesCli, ExportAndPredictRefuseCraftedFiles) {
  WriteBytes(TempPath("cli_wrap.params"), WrappingParams());
  WriteBytes(TempPath("cli_count.params"), CountBomb());
  for (const char* name : {"cli_wrap.params", "cli_count.params"}) {
    const bool wrap = name[4] == 'w';
    const std::vector<std::string> parts = {TempPath(name) + ": byte " + (wrap ? "32: array 0's shape" : "16: the array count")};
    ExpectCleanRefusal(Tally("export " + TempPath(name) + " --out " + TempPath("out.safetensors")), parts);
    ExpectCleanRefusal(Tally("export " + TempPath(name) + " --format onnx --out " + TempPath("out.onnx")), parts);
    ExpectCleanRefusal(Tally("predict " + TempPath(name) + " " + TempPath(name) + " " + TempPath("out.nd")), parts);
  }
  // A class count from the metadata that would size a 2^31-class classifier before the
  // weights were compared with it.
  const std::string claims = ParamsClaiming("classes.params", "2000000000");
  ExpectCleanRefusal(Tally("export " + claims + " --out " + TempPath("out.safetensors")),
                     {claims + ": metadata 'num_classes' 2000000000", "4 elements"});
  Tensor images = Tensor::Zeros({1, 3, 32, 32}, DType::kF32);
  ASSERT_TRUE(WriteNDArrayFile(TempPath("images.nd"), {{"data", images}}).ok());
  ExpectCleanRefusal(Tally("predict " + claims + " " + TempPath("images.nd") + " " + TempPath("out.nd")),
                     {claims + ": a classifier of 2000000000 classes, but the file's arrays hold only 4 elements"});
}
#endif  // TALLY_BINARY

}  // namespace
}  // namespace tally
