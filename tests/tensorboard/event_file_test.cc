// TensorBoard event files (tensorboard/, docs/tensorboard.md): CRC-32C against the published
// vectors (RFC 3720, B.4), the masked CRC, the record framing byte by byte, and a file
// written by EventWriter read back by the tests' own reader (read_events.h), which checks
// every record.
#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensorboard/event.pb.h"
#include "tensorboard/event_writer.h"
#include "tensorboard/record_format.h"
#include "tests/tensorboard/read_events.h"
#include "tests/temp_dir.h"

namespace tally {
namespace tensorboard {
namespace {

TEST(Crc32cTest, PublishedVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(ExtendCrc32c(Crc32c("1234", 4), "56789", 5), 0xE3069283u);
}

TEST(Crc32cTest, MaskRotatesRightBy15AndAddsTheDelta) {
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc(0xE3069283u), 0xc78ab0e5u);
  for (uint32_t crc : {0u, 1u, 0x8000u, 0xE3069283u, 0xffffffffu}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
    EXPECT_NE(MaskCrc(crc), crc);
  }
}

TEST(RecordTest, FramingByteByByte) {
  const std::string r = FrameRecord("abc");
  ASSERT_EQ(r.size(), 12u + 3 + 4);
  EXPECT_EQ(LittleEndian(r, 0, 8), 3u);            // the length
  EXPECT_EQ(LittleEndian(r, 8, 4), 0x0e4999b0u);   // MaskCrc(Crc32c(03 00 00 00 00 00 00 00))
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(LittleEndian(r, 15, 4), 0x21f1576eu);  // MaskCrc(Crc32c("abc"))
  const std::string empty = FrameRecord("");
  ASSERT_EQ(empty.size(), 16u);
  EXPECT_EQ(LittleEndian(empty, 8, 4), 0x07980329u);
  EXPECT_EQ(LittleEndian(empty, 12, 4), 0xa282ead8u);  // the CRC of nothing is 0
}

std::string FromHex(const char* hex) {
  std::string out;
  for (const char* p = hex; p[0] != '\0' && p[1] != '\0'; p += p[2] == ' ' ? 3 : 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(p, 2), nullptr, 16)));
  }
  return out;
}

// docs/tensorboard.md's examples: the first record of a file and a scalar event, as
// TensorBoard's own protobuf classes serialise those messages.
TEST(RecordTest, TheDocumentedBytes) {
  Event first;
  first.set_wall_time(1795000000.25);
  first.set_file_version(kFileVersion);
  EXPECT_EQ(FrameRecord(first.SerializeAsString()),
            FromHex("18 00 00 00 00 00 00 00 a3 7f 4b 22 09 00 00 10 b0 61 bf da 41 1a 0d 62 72 61 69 6e 2e 45 "
                    "76 65 6e 74 3a 32 7f 86 cf 7e"));
  Event scalar;
  scalar.set_wall_time(1795000000.25);
  scalar.set_step(20);
  Summary::Value* v = scalar.mutable_summary()->add_value();
  v->set_tag("train/loss");
  v->set_simple_value(0.5f);
  EXPECT_EQ(scalar.SerializeAsString(),
            FromHex("09 00 00 10 b0 61 bf da 41 10 14 2a 13 0a 11 0a 0a 74 72 61 69 6e 2f 6c 6f 73 73 15 00 00 00 3f"));
}

TEST(RecordTest, ParseRefusesEveryDamagedField) {
  const std::string r = FrameRecord("hello");
  RecordView view;
  size_t used = 0;
  ASSERT_TRUE(ParseRecord(r.data(), r.size(), &view, &used).ok());
  EXPECT_EQ(used, r.size());
  EXPECT_EQ(std::string(view.data, view.length), "hello");
  const struct {
    size_t byte;
    const char* names;
  } cases[] = {{0, "length"}, {9, "length"}, {13, "data"}, {18, "data"}};
  for (const auto& c : cases) {
    std::string bad = r;
    bad[c.byte] ^= 0x01;
    const Status s = ParseRecord(bad.data(), bad.size(), &view, &used);
    EXPECT_FALSE(s.ok()) << "byte " << c.byte;
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s;
  }
  for (size_t n : {size_t{0}, size_t{11}, r.size() - 1}) {
    const Status s = ParseRecord(r.data(), n, &view, &used);
    EXPECT_FALSE(s.ok()) << n;
    EXPECT_NE(s.message().find("cut short"), std::string::npos) << s;
  }
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  return names;
}

TEST(EventWriterTest, WritesTheVersionThenOneEventPerCall) {
  ScopedTempDir tmp("event_writer_test");
  const std::string dir = tmp.Path("runs/worker-0");  // parents created too
  std::unique_ptr<EventWriter> writer;
  ASSERT_TRUE(EventWriter::Open(dir, &writer).ok());
  const double before = WallTimeSeconds();
  ASSERT_TRUE(writer->AddScalars(20, {{"train/loss", 2.25}, {"train/accuracy", 0.5}}).ok());
  ASSERT_TRUE(writer->AddScalars(40, {{"train/loss", 1.5}, {"train/skipped_steps", 0}}).ok());
  ASSERT_TRUE(writer->Flush().ok());
  const std::string path = writer->path();
  writer.reset();

  const std::vector<std::string> names = FilesIn(dir);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(dir + "/" + names[0], path);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_TRUE(std::regex_match(names[0], std::regex("events\\.out\\.tfevents\\.[0-9]{10}\\.(.*)")));
  EXPECT_EQ(names[0].substr(std::strlen(kFilePrefix) + 11), host);

  const std::vector<Event> events = ReadEventFile(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_FALSE(events[0].has_summary());
  EXPECT_GT(events[0].wall_time(), before - 60);
  EXPECT_EQ(events[1].step(), 20);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 2.25f);
  EXPECT_EQ(events[1].summary().value(1).tag(), "train/accuracy");
  EXPECT_EQ(events[1].summary().value(1).simple_value(), 0.5f);
  EXPECT_GE(events[1].wall_time(), before);
  EXPECT_EQ(events[2].step(), 40);
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 1.5f);
  // A 0 is written too (TensorBoard drops a value that has none): simple_value is in a oneof.
  ASSERT_EQ(events[2].summary().value_size(), 2);
  EXPECT_EQ(events[2].summary().value(1).value_case(), Summary::Value::kSimpleValue);
  EXPECT_NE(events[2].SerializeAsString().find(std::string("\x15\0\0\0\0", 5)), std::string::npos);
}

TEST(EventWriterTest, TwoWritersInOneFolderNeverShareAFile) {
  ScopedTempDir tmp("event_writer_test");
  std::unique_ptr<EventWriter> a, b;
  ASSERT_TRUE(EventWriter::Open(tmp.Path("run"), &a).ok());
  ASSERT_TRUE(EventWriter::Open(tmp.Path("run"), &b).ok());
  EXPECT_NE(a->path(), b->path());
  ASSERT_TRUE(a->AddScalars(1, {{"x", 1}}).ok());
  ASSERT_TRUE(b->AddScalars(1, {{"x", 2}}).ok());
  a.reset();
  b.reset();
  EXPECT_EQ(FilesIn(tmp.Path("run")).size(), 2u);
}

// Someone who can write to a shared DIR plants links at the names the writer will choose:
// it neither follows one nor writes through it, and says so.
TEST(EventWriterTest, NeverFollowsALinkAtItsFilesName) {
  ScopedTempDir tmp("event_writer_test");
  const std::string target = tmp.Path("target");
  std::ofstream(target) << "kept";
  std::filesystem::create_directories(tmp.Path("run"));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const int64_t now = static_cast<int64_t>(WallTimeSeconds());
  for (int64_t t = now - 1; t <= now + 30; ++t) {
    const std::string name = tmp.Path("run/") + kFilePrefix + std::to_string(t) + "." + host;
    std::filesystem::create_symlink(target, name);
    std::filesystem::create_symlink(target, name + "." + std::to_string(getpid()));
  }
  std::unique_ptr<EventWriter> writer;
  const Status s = EventWriter::Open(tmp.Path("run"), &writer);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(tmp.Path("run/") + kFilePrefix), std::string::npos) << s;
  EXPECT_EQ(writer, nullptr);
  std::ifstream in(target);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "kept");
}

TEST(EventWriterTest, AFolderThatCannotBeMadeIsNamed) {
  ScopedTempDir tmp("event_writer_test");
  std::ofstream(tmp.Path("file")) << "not a folder";
  std::unique_ptr<EventWriter> writer;
  const Status s = EventWriter::Open(tmp.Path("file/worker-0"), &writer);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(tmp.Path("file/worker-0")), std::string::npos) << s;
  EXPECT_EQ(writer, nullptr);
}

}  // namespace
}  // namespace tensorboard
}  // namespace tally
