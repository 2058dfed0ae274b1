// The seed corpora of the file-format fuzzers (file_seeds.h): good files written by Tally's
// writers, the older layouts MXNet wrote, and the crafted files of
// tests/models/hostile_files_test.cc.
#include "tests/fuzz/file_seeds.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "data/recordio_internal.h"
#include "models/ndarray_file.h"
#include "models/safetensors.h"
#include "tests/fuzz/layouts.h"
#include "worker/checkpoint.h"

namespace tally {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

std::string ReadBytes(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  CHECK(f) << "cannot open " << path;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

Tensor Filled(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype);
  for (size_t b = 0; b < t.nbytes(); ++b) static_cast<uint8_t*>(t.raw_data())[b] = static_cast<uint8_t>(b * 37 + 11);
  return t;
}

Tensor JsonArray(const std::string& json) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(json.size())}, DType::kU8);
  std::memcpy(t.raw_data(), json.data(), json.size());
  return t;
}

// A version 2 array header: dense, the shape, cpu(0), the type flag.
void PutArrayHeader(const Shape& shape, uint32_t flag, std::string* out) {
  PutLe32(0xF993FAC9u, out);
  PutLe32(0, out);
  PutLe32(static_cast<uint32_t>(shape.size()), out);
  for (int64_t d : shape) PutLe64(static_cast<uint64_t>(d), out);
  PutLe32(1, out);
  PutLe32(0, out);
  PutLe32(flag, out);
}

std::string NDArrayHeader(uint64_t count) {
  std::string out;
  PutLe64(0x112, &out);
  PutLe64(0, &out);
  PutLe64(count, &out);
  return out;
}

void WriteNDArraySeeds(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<NamedTensor> arrays;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    arrays.push_back({std::string("arg:x_") + DTypeName(t), Filled({3, 1, 2}, t)});
  }
  CHECK(WriteNDArrayFile(dir / "dtypes", arrays).ok());
  // Tally's .params: Module names, a 4-D convolution weight and the metadata array.
  CHECK(WriteNDArrayFile(dir / "tally_params",
                         {{"arg:conv0_weight", Filled({4, 3, 2, 2}, DType::kF32)},
                          {"aux:bn0_moving_mean", Filled({4}, DType::kF32)},
                          {"tally:metadata", JsonArray("{\"format\":\"tally-params\",\"version\":\"2\"}")}})
            .ok());
  // Version 1, the legacy layout with a float64 array, and version 3's scalar, unnamed.
  std::string old = NDArrayHeader(3);
  PutLe32(0xF993FAC8u, &old);
  PutLe32(1, &old);
  PutLe64(2, &old);
  for (uint32_t v : {1u, 0u, 0u, 0x3f800000u, 0x40000000u}) PutLe32(v, &old);
  for (uint32_t v : {1u, 1u, 1u, 0u, 1u}) PutLe32(v, &old);  // legacy: ndim 1, [1], cpu(0), float64
  PutLe64(0x3ff8000000000000ull, &old);
  PutLe32(0xF993FACAu, &old);
  for (uint32_t v : {0u, 0u, 1u, 0u, 4u, 7u}) PutLe32(v, &old);  // dense, ndim 0, cpu(0), int32 7
  PutLe64(0, &old);
  WriteSeed(dir, "old_layouts", old);
  // The crafted files: a shape whose product wraps to 16 elements, and a count of 2^24.
  std::string wrap = NDArrayHeader(1);
  PutArrayHeader({16, (1 << 20) + 1, (int64_t{1} << 40) - (1 << 20) + 1, 1}, 0, &wrap);
  wrap += std::string(64, '\x01');
  PutLe64(1, &wrap);
  PutLe64(16, &wrap);
  wrap += "arg:conv0_weight";
  WriteSeed(dir, "shape_wraps", wrap);
  WriteSeed(dir, "count_bomb", NDArrayHeader(1 << 24));
}

void WriteSafetensorsSeeds(const fs::path& dir) {
  fs::create_directories(dir);
  CHECK(WriteSafetensors(dir / "tensors",
                         {{"w", Filled({2, 3}, DType::kF32)}, {"labels", Filled({4}, DType::kI32)},
                          {"empty", Filled({0, 5}, DType::kU8)}, {"scalar", Filled({}, DType::kBF16)},
                          {"h", Filled({3}, DType::kF16)}},
                         {{"format", "tally-states"}, {"epoch", "3"}})
            .ok());
  CHECK(WriteSafetensorsRaw(dir / "raw_i64", {{"num_batches_tracked", "I64", {}, std::string(8, '\x02')}}).ok());
  const std::string header = " { \"a\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 1 ] , \"dtype\" : \"U8\" , "
                             "\"data_offsets\" : [ 0 , 1 ] } }  ";
  std::string escapes;
  PutLe64(header.size(), &escapes);
  WriteSeed(dir, "escapes", escapes + header + "x");
  const std::string huge = "{\"t\":{\"dtype\":\"F32\",\"shape\":[0,1099511627776,1099511627776],\"data_offsets\":[0,0]}}";
  std::string zero;
  PutLe64(huge.size(), &zero);
  WriteSeed(dir, "zero_elements_huge_dims", zero + huge);
}

// Checkpoint 1 of `prefix`, with a 4-D weight (reordered to MXNet's layout in the .params).
Checkpoint SmallCheckpoint(float tag) {
  Checkpoint c;
  c.epoch = 1;
  c.batch = 5;
  c.step = 42;
  c.params = {{"conv1.weight", Filled({4, 2, 2, 3}, DType::kF32)}, {"fc.bias", Filled({3}, DType::kF32)}};
  c.params[1].tensor.data<float>()[0] = tag;
  c.states = {{"conv1.weight", Filled({4, 2, 2, 3}, DType::kF32)}};
  c.info = {{"network", "resnet"}, {"num_layers", "8"}, {"num_classes", "3"}};
  return c;
}

void WriteCheckpointSeeds(const fs::path& dir) {
  const fs::path work = dir / "work";
  fs::create_directories(work);
  const std::string prefix = (work / "m").string();
  CHECK(SaveCheckpoint(prefix, SmallCheckpoint(1)).ok());
  const std::string params = ReadBytes(CheckpointPath(prefix, 1, ".params"));
  const std::string states = ReadBytes(CheckpointPath(prefix, 1, ".states"));
  CHECK(SaveCheckpoint(prefix, SmallCheckpoint(2)).ok());
  const std::string other_states = ReadBytes(CheckpointPath(prefix, 1, ".states"));
  // Version 1: the .params as safetensors.
  CHECK(WriteSafetensors((work / "v1").string(), SmallCheckpoint(3).params,
                         {{"format", "tally-params"}, {"version", "1"}, {"checkpoint", "00000000000000aa"},
                          {"epoch", "1"}, {"batch", "0"}, {"step", "0"}})
            .ok());
  CHECK(WriteSafetensors((work / "v1s").string(), {},
                         {{"format", "tally-states"}, {"version", "1"}, {"checkpoint", "00000000000000aa"}})
            .ok());
  const std::string v1 = CheckpointInput(0, ReadBytes(work / "v1"), ReadBytes(work / "v1s"));
  fs::remove_all(work);  // every file in dir is a seed
  WriteSeed(dir, "saved", CheckpointInput(0, params, states));
  WriteSeed(dir, "states_prev", CheckpointInput(kCheckpointStatesAsPrev, params, states));
  WriteSeed(dir, "other_states", CheckpointInput(0, params, other_states));
  WriteSeed(dir, "version_1", v1);
}
}  // namespace

void WriteSeed(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  CHECK(f) << "cannot create " << path;
  CHECK_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size()) << path;
  CHECK_EQ(std::fclose(f), 0) << path;
}

void WriteFileSeeds(const std::filesystem::path& dir) {
  WriteNDArraySeeds(dir / "ndarray");
  WriteSafetensorsSeeds(dir / "safetensors");
  WriteCheckpointSeeds(dir / "checkpoint");
}

}  // namespace fuzz
}  // namespace tally
