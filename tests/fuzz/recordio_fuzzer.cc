// libFuzzer harness: hostile .rec and .idx files through the RecordIO readers.
//
// Each input is a flags byte, the text of a .idx file and the bytes of a .rec file (layout
// in docs/fuzzing.md). The harness puts both in memory files (memfd, opened by the readers
// through /proc/self/fd: real files to them, without a disk's latency), parses the text
// as a .idx and as a .lst, opens the .rec (through the .idx when the flags say so), reads
// every indexed record, then reads the file front to back as the loader does, optionally
// scanning for the next record start after each corrupt one. Every record that reads is
// split as an image record.
//
// Besides crashes, leaks and undefined behaviour, it checks that an accepted .idx points
// only inside the .rec, and round trips: a record that reads is framed again by
// AppendRecord and must read back unchanged, ending where the framing ends; an image record
// whose header has no extra labels packs back to the same bytes; a scan for the next
// record always moves forward.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include <glog/logging.h>

#include "data/recordio.h"
#include "data/recordio_internal.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/layouts.h"

namespace tally {
namespace fuzz {
namespace {

constexpr size_t kMaxIndexedReads = 64;
constexpr int kMaxSequentialReads = 256;

// A file in memory, named by a path any open() accepts.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, MFD_CLOEXEC)) {
    PCHECK(fd_ >= 0) << "memfd_create";
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& path() const { return path_; }
  void Set(std::string_view bytes) {
    PCHECK(ftruncate(fd_, 0) == 0);
    PCHECK(pwrite(fd_, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  }

 private:
  int fd_;
  std::string path_;
};

MemFile* rec_file;
MemFile* idx_file;
MemFile* again_file;

// Round trips of one record that read without error.
void CheckRecord(const std::string& payload) {
  std::string framed;
  AppendRecord(payload, &framed);
  CHECK_EQ(framed.size() % recordio::kAlign, 0u);
  again_file->Set(framed);
  std::unique_ptr<RecordReader> reader;
  CHECK(RecordReader::Open(again_file->path(), "", &reader).ok());
  std::string back;
  uint64_t next = 0;
  Status s = reader->ReadAt(0, &back, &next);
  CHECK(s.ok()) << "a record framed by AppendRecord does not read back: " << s;
  CHECK(back == payload) << "a record framed by AppendRecord reads back changed";
  CHECK_EQ(next, framed.size());

  ImageRecordHeader header;
  std::string_view image;
  if (!UnpackImageRecord(payload, &header, &image).ok()) return;
  CHECK_EQ(header.labels.size(), header.flag);
  if (header.flag == 0 || FloatBits(header.label) == 0) {
    CHECK(PackImageRecord(header, image) == payload) << "an image record packs back changed";
  }
}

}  // namespace

int FuzzOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const std::string_view idx = in.Bytes(in.Le16());
  const std::string_view rec = in.Rest();
  rec_file->Set(rec);
  idx_file->Set(idx);
  const std::string& rec_path = rec_file->path();
  const std::string& idx_path = idx_file->path();

  std::vector<RecordIndexEntry> entries;
  (void)ReadIndexFile(idx_path, &entries);
  std::vector<ListEntry> list;
  (void)ReadListFile(idx_path, &list);

  std::unique_ptr<RecordReader> reader;
  const bool indexed = (flags & kRecordUseIndex) && RecordReader::Open(rec_path, idx_path, &reader).ok();
  if (!indexed) CHECK(RecordReader::Open(rec_path, "", &reader).ok());
  CHECK_EQ(reader->file_size(), rec.size());
  for (const RecordIndexEntry& e : reader->index()) {
    CHECK(e.offset < rec.size() && rec.size() - e.offset >= recordio::kPartHeaderBytes)
        << "the .idx was accepted with offset " << e.offset << " in a .rec of " << rec.size() << " bytes";
  }
  std::string payload;
  for (size_t i = 0; i < std::min(reader->num_indexed(), kMaxIndexedReads); ++i) {
    if (reader->ReadIndexed(i, &payload).ok()) CheckRecord(payload);
  }

  reader->Seek(0);
  for (int i = 0; i < kMaxSequentialReads; ++i) {
    bool eof = false;
    const uint64_t at = reader->cursor();
    Status s = reader->ReadNext(&payload, &eof);
    if (eof) break;
    if (s.ok()) {
      CHECK_GT(reader->cursor(), at);
      CheckRecord(payload);
      continue;
    }
    if (!(flags & kRecordScanAfterError)) break;
    uint64_t start = 0;
    CHECK(reader->FindRecordStart(at + 1, &start).ok());
    CHECK(start > at && start <= reader->file_size()) << "the scan went from " << at << " to " << start;
    reader->Seek(start, reader->cursor_index() + 1);
  }
  return 0;
}

}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_logtostderr = true;
  tally::fuzz::rec_file = new tally::fuzz::MemFile("in.rec");
  tally::fuzz::idx_file = new tally::fuzz::MemFile("in.idx");
  tally::fuzz::again_file = new tally::fuzz::MemFile("again.rec");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FuzzOneInput(data, size);
}
