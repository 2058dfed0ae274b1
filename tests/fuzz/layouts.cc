#include "tests/fuzz/layouts.h"

#include <glog/logging.h>

#include "tests/fuzz/fuzz_input.h"

namespace tally {
namespace fuzz {

std::vector<std::string> MessageFrames(const Message& msg) {
  std::vector<std::string> frames;
  frames.push_back(msg.meta.SerializeAsString());
  for (const Tensor& t : msg.data) frames.emplace_back(static_cast<const char*>(t.raw_data()), t.nbytes());
  return frames;
}

std::string JobByte(const JobShape& shape) {
  CHECK(shape.num_servers >= 1 && shape.num_servers <= 2);
  CHECK(shape.num_workers >= 1 && shape.num_workers <= 4);
  std::string out;
  PutByte(static_cast<uint8_t>((shape.num_servers - 1) | (shape.num_workers - 1) << 1 |
                               (shape.step_recorder ? 8 : 0)),
          &out);
  return out;
}

void AppendMessage(const std::vector<std::string>& frames, int misalign, std::string* out) {
  CHECK_LE(frames.size(), 7u);
  CHECK(misalign >= 0 && misalign < 4);
  PutByte(static_cast<uint8_t>(frames.size() | misalign << 3), out);
  for (const std::string& f : frames) {
    CHECK_LT(f.size(), 1u << 16);
    PutLe16(static_cast<uint16_t>(f.size()), out);
    out->append(f);
  }
}

std::string RecordInput(uint8_t flags, std::string_view idx, std::string_view rec) {
  CHECK_LT(idx.size(), 1u << 16);
  std::string out;
  PutByte(flags, &out);
  PutLe16(static_cast<uint16_t>(idx.size()), &out);
  out.append(idx);
  out.append(rec);
  return out;
}

std::string CheckpointInput(uint8_t flags, std::string_view params, std::string_view states) {
  CHECK_LT(params.size(), 1u << 16);
  std::string out;
  PutByte(flags, &out);
  PutLe16(static_cast<uint16_t>(params.size()), &out);
  out.append(params);
  out.append(states);
  return out;
}

std::string ImageInput(uint8_t options, std::string_view image) {
  std::string out;
  PutByte(options, &out);
  out.append(image);
  return out;
}

}  // namespace fuzz
}  // namespace tally
