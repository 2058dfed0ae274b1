// Crafted .rec, .idx and .lst files and image records against the RecordIO readers
// (docs/security.md's hostile files): each is refused with a Status naming the file, the
// byte offset and the field, and no declared length is allocated before it is checked
// against the bytes the file holds.
#include <sys/resource.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/recordio.h"
#include "data/recordio_internal.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

class RecordIoHostileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_.Path(name), std::ios::binary) << bytes;
    return dir_.Path(name);
  }

  ScopedTempDir dir_{"recordio_hostile_test"};
};

void ExpectRefused(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok()) << "accepted";
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s << "\n  lacks: " << p;
}

long PeakRssMb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

std::string TwoRecords() {
  std::string rec;
  AppendRecord("first", &rec);  // 8 + 8 bytes
  AppendRecord("second", &rec);
  return rec;
}

TEST_F(RecordIoHostileTest, IndexFieldsAreNamedWithTheirOffset) {
  const std::string rec = Write("a.rec", TwoRecords());
  std::unique_ptr<RecordReader> r;
  std::vector<RecordIndexEntry> entries;
  // A byte_offset that is not a number, one past 2^64, and a line with three fields.
  ExpectRefused(ReadIndexFile(Write("x.idx", "0\t0\n1\tx16\n"), &entries),
                {Write("x.idx", "0\t0\n1\tx16\n") + ":2: byte 6: record 1's byte_offset", "got '1\tx16'"});
  ExpectRefused(ReadIndexFile(Write("big.idx", "0 0\r\n1 18446744073709551616\r\n"), &entries),
                {"big.idx:2: byte 7: record 1's byte_offset: not an unsigned 64-bit integer"});
  ExpectRefused(ReadIndexFile(Write("three.idx", "\n0\t0\t9\n"), &entries),
                {"three.idx:2: byte 1: record 0: 3 fields"});
  ExpectRefused(ReadIndexFile(Write("key.idx", "-1\t0\n"), &entries), {"key.idx:1: byte 0: record 0's key"});
  // Offsets past the .rec, unaligned, and near 2^64 (where adding a header's 8 bytes wraps).
  for (const char* offset : {"32", "6", "18446744073709551612"}) {
    const std::string idx = Write("off.idx", std::string("0\t0\n1\t") + offset + "\n");
    ExpectRefused(RecordReader::Open(rec, idx, &r), {idx + ": record 1 (key 1) has byte offset " + offset});
  }
}

TEST_F(RecordIoHostileTest, ListFieldsAreNamedWithTheirOffset) {
  std::vector<ListEntry> entries;
  ExpectRefused(ReadListFile(Write("a.lst", "0\t1\ta.jpg\n1\tnan?\t2\tb.jpg\n"), &entries),
                {"a.lst:2: byte 12: entry 1's label 0: not a number", "got '1\tnan?\t2\tb.jpg'"});
  ExpectRefused(ReadListFile(Write("b.lst", "0\t1\t\n"), &entries), {"b.lst:1: byte 4: entry 0's path: empty"});
  ExpectRefused(ReadListFile(Write("c.lst", "x\t1\ta.jpg\n"), &entries), {"c.lst:1: byte 0: entry 0's index"});
  ExpectRefused(ReadListFile(Write("d.lst", "  \n0\ta.jpg\n"), &entries), {"d.lst:2: byte 3: entry 0: 2 fields"});
}

TEST_F(RecordIoHostileTest, DeclaredLengthsAreCheckedBeforeAllocating) {
  const long before = PeakRssMb();
  std::string rec = TwoRecords();
  // The largest 29-bit length in record 1's header, in a 32-byte file.
  rec.replace(16 + 4, 4, std::string("\xff\xff\xff\x1f", 4));
  const std::string path = Write("huge.rec", rec);
  std::unique_ptr<RecordReader> r;
  ASSERT_TRUE(RecordReader::Open(path, "", &r).ok());
  std::string payload;
  ExpectRefused(r->ReadAt(16, &payload, nullptr, 1),
                {path + ": record 1 at byte offset 16: truncated: the part declares 536870911 bytes"});
  // An offset near 2^64 given to ReadAt directly: refused as past the end, not wrapped.
  ExpectRefused(r->ReadAt(~uint64_t{3}, &payload),
                {path + ": at byte offset 18446744073709551612: truncated: the file (32 bytes) ends before"});
  EXPECT_LT(PeakRssMb() - before, 100) << "a declared length was allocated before it was checked";
}

TEST(RecordIoHostileImage, LabelCountIsCheckedAgainstTheRecord) {
  ImageRecordHeader h;
  std::string_view image;
  for (uint32_t flag : {3u, 1u << 20, 0xFFFFFFFFu}) {
    std::string rec = PackImageRecord(ImageRecordHeader{}, "abcdefgh");  // room for 2 labels
    rec.replace(0, 4, std::string(reinterpret_cast<const char*>(&flag), 4));
    ExpectRefused(UnpackImageRecord(rec, &h, &image),
                  {"byte 0 of the record: the image header's flag: " + std::to_string(flag) +
                   " labels, but the record holds only 32 bytes (at most 2 labels)"});
  }
  ExpectRefused(UnpackImageRecord(std::string(23, '\0'), &h, &image),
                {"the image header: the record's 23 bytes are shorter than its 24-byte header"});
}

}  // namespace
}  // namespace tally
