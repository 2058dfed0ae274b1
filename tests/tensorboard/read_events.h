// A reader of TensorBoard event files for tests, apart from the writer's code: every
// record's length CRC and data CRC are recomputed here (docs/tensorboard.md) and every
// record's data must parse as an Event; a failure is a gtest failure naming the byte.
//
//   std::vector<tensorboard::Event> events = tensorboard::ReadEventFile(writer->path());
//   EXPECT_EQ(events[0].file_version(), "brain.Event:2");
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensorboard/event.pb.h"
#include "tensorboard/record_format.h"

namespace tally {
namespace tensorboard {

// The little-endian integer of `bytes` bytes at b[at].
inline uint64_t LittleEndian(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

inline std::vector<Event> ReadEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << path << ": a record cut short at byte " << at;
    if (bytes.size() - at < 16) break;
    const uint64_t length = LittleEndian(bytes, at, 8);
    EXPECT_EQ(LittleEndian(bytes, at + 8, 4), MaskCrc(Crc32c(bytes.data() + at, 8))) << path << " byte " << at;
    EXPECT_LE(length, bytes.size() - at - 16) << path << " byte " << at;
    if (length > bytes.size() - at - 16) break;
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(LittleEndian(bytes, at + 12 + length, 4), MaskCrc(Crc32c(data.data(), data.size())))
        << path << " byte " << at;
    Event e;
    EXPECT_TRUE(e.ParseFromString(data)) << path << " byte " << at;
    events.push_back(e);
    at += 16 + length;
  }
  return events;
}

}  // namespace tensorboard
}  // namespace tally
