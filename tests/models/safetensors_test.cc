// Round trips through models/safetensors.h and the Status errors for damaged files.
#include "models/safetensors.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace tally {
namespace {

// Every file of the test program lies in one directory, removed when the program exits.
std::string TempPath(const std::string& name) {
  static ScopedTempDir dir("safetensors_test");
  return dir.Path(name);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

// A file made of a header and `data_bytes` bytes of data.
std::string File(const std::string& header, size_t data_bytes) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + std::string(data_bytes, '\0');
}

Status ReadBytes(const std::string& name, const std::string& bytes) {
  std::string path = TempPath(name);
  WriteBytes(path, bytes);
  SafetensorsFile f;
  return ReadSafetensors(path, &f);
}

TEST(SafetensorsTest, RoundTrip) {
  Tensor w = Tensor::Empty({2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = 0.5f * i - 1;
  Tensor labels = Tensor::Empty({4}, DType::kI32);
  for (int i = 0; i < 4; ++i) labels.data<int32_t>()[i] = -i;
  Tensor empty = Tensor::Empty({0, 5}, DType::kF32);
  Tensor half = Tensor::Empty({3}, DType::kF16);
  for (int i = 0; i < 3; ++i) half.data<uint16_t>()[i] = FloatToHalf(1.5f * i);
  std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"fc.weight", w}, {"labels", labels}, {"empty", empty},
                                      {"na\"me\\\n", half}},
                               {{"epoch", "3"}, {"note", "x\"y"}})
                  .ok());

  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % kSafetensorsHeaderAlign, 0u);

  SafetensorsFile f;
  Status s = ReadSafetensors(path, &f);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].name, "fc.weight");
  EXPECT_EQ(f.metadata["epoch"], "3");
  EXPECT_EQ(f.metadata["note"], "x\"y");
  const Tensor* w2 = f.Find("fc.weight");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->shape(), w.shape());
  EXPECT_EQ(std::memcmp(w2->raw_data(), w.raw_data(), w.nbytes()), 0);
  EXPECT_EQ(f.Find("labels")->data<int32_t>()[3], -3);
  EXPECT_EQ(f.Find("empty")->shape(), (Shape{0, 5}));
  ASSERT_NE(f.Find("na\"me\\\n"), nullptr);
  EXPECT_EQ(f.Find("na\"me\\\n")->dtype(), DType::kF16);
  EXPECT_EQ(HalfToFloat(f.Find("na\"me\\\n")->data<uint16_t>()[2]), 3.0f);
  EXPECT_EQ(f.Find("missing"), nullptr);
}

TEST(SafetensorsTest, WritesRawTensorsOfAnyDType) {
  int64_t steps = -5;
  float values[2] = {1.5f, -2.0f};
  std::string path = TempPath("raw.safetensors");
  ASSERT_TRUE(WriteSafetensorsRaw(
                  path,
                  {{"w", "F32", {2}, std::string(reinterpret_cast<char*>(values), 8)},
                   {"bn.num_batches_tracked", "I64", {}, std::string(reinterpret_cast<char*>(&steps), 8)}},
                  {{"format", "pt"}})
                  .ok());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  ASSERT_EQ(bytes.size(), 8 + header_len + 16);
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
  ASSERT_EQ(header_len, (json.size() + 7) / 8 * 8);
  EXPECT_EQ(bytes.substr(8, header_len), json + std::string(header_len - json.size(), ' '));
  int64_t steps_read = 0;
  std::memcpy(&steps_read, bytes.data() + 8 + header_len + 8, 8);
  EXPECT_EQ(steps_read, -5);

  // Tally's own reader knows only Tally's dtypes.
  SafetensorsFile f;
  Status s = ReadSafetensors(path, &f);
  EXPECT_NE(s.message().find("unsupported dtype 'I64'"), std::string::npos) << s;
}

TEST(SafetensorsTest, ReadsEscapesAndSpacing) {
  std::string h = " { \"a\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 1 ] , \"dtype\" : \"U8\" , "
                  "\"data_offsets\" : [ 0 , 1 ] } }  ";
  std::string path = TempPath("escapes.safetensors");
  WriteBytes(path, File(h, 1));
  SafetensorsFile f;
  Status s = ReadSafetensors(path, &f);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(f.Find("a\xc3\xa9\xf0\x9f\x98\x80"), nullptr);
}

TEST(SafetensorsTest, ErrorsNameTheFileAndTheProblem) {
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offs) {
    return "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" +
           offs + "}}";
  };
  struct Case { std::string name, bytes, expect; };
  std::string huge(8, '\xff');
  Case cases[] = {
      {"short", std::string("\x10\x00\x00", 3), "byte 0: the header length: truncated"},
      {"huge_header", huge + "{}", "byte 0: the header length: 18446744073709551615 exceeds the cap"},
      {"header_past_end", File("{}", 0).substr(0, 8) + "{", "byte 0: the header length: truncated"},
      {"offsets_out_of_range", File(entry("F32", "[4]", "[0,16]"), 8), "byte 55: tensor 't' data_offsets: [0, 16] out of range of the 8 data bytes"},
      {"unknown_dtype", File(entry("F64", "[1]", "[0,8]"), 8), "byte 22: tensor 't' dtype: unsupported dtype 'F64'"},
      {"shape_mismatch", File(entry("F32", "[3]", "[0,8]"), 8), "byte 36: tensor 't' shape: [3] of F32 is 12 bytes"},
      {"gap", File(entry("F32", "[1]", "[4,8]"), 8), "byte 55: tensor 't' data_offsets: [4, 8] leaves a gap or overlap"},
      {"trailing_data", File(entry("F32", "[1]", "[0,4]"), 8), ": the data: 4 bytes after the last tensor"},
      {"bad_json", File("{\"t\":{\"dtype\":\"F32\",", 0), "malformed JSON"},
      {"not_object", File("[]", 0), "byte 8: the header: expected a JSON object"},
      {"missing_field", File("{\"t\":{\"dtype\":\"F32\"}}", 0), "byte 13: tensor 't' its object: needs dtype, shape"},
      {"duplicate", File("{\"__metadata__\":{},\"__metadata__\":{}}", 0), "the header: duplicate key '__metadata__'"},
      {"overflowing_shape",
       File(entry("F32", "[1099511627776,1099511627776]", "[0,4]"), 4), "byte 36: tensor 't' shape: [1099511627776,1099511627776] has more elements than a tensor can hold"},
  };
  for (const Case& c : cases) {
    Status s = ReadBytes(c.name, c.bytes);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(TempPath(c.name)), std::string::npos) << s;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.name << ": " << s;
  }
  SafetensorsFile f;
  Status s = ReadSafetensors(TempPath("does_not_exist"), &f);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace tally
