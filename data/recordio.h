// RecordIO: MXNet's .rec/.idx/.lst files, read and written byte for byte as dmlc-core and
// MXNet's im2rec do, so existing ImageNet packs work unchanged. Format: docs/recordio.md;
// constants: data/recordio_format.h.
//
//   std::unique_ptr<RecordWriter> w;
//   TALLY_RETURN_IF_ERROR(RecordWriter::Open("train.rec", &w));
//   ImageRecordHeader h;  h.label = 3;  h.id = 7;
//   TALLY_RETURN_IF_ERROR(w->Write(PackImageRecord(h, jpeg_bytes), /*key=*/7));
//   TALLY_RETURN_IF_ERROR(w->Close("train.idx"));
//
//   std::unique_ptr<RecordReader> r;
//   TALLY_RETURN_IF_ERROR(RecordReader::Open("train.rec", "train.idx", &r));
//   std::string rec;
//   TALLY_RETURN_IF_ERROR(r->ReadIndexed(12, &rec));     // the 13th line of the .idx
//   TALLY_RETURN_IF_ERROR(UnpackImageRecord(rec, &h, &image));
//
// Errors of the outside world (missing files, corrupt framing, malformed lines) come back as
// Status, naming the file, the record index (when known) and the byte offset. No input
// makes a reader crash or allocate more than recordio::kMaxRecordBytes for one record.
//
// Thread-safety: RecordReader::ReadAt and ReadIndexed read with pread and touch no shared
// state, so any number of threads may call them on one reader at once (the data loader's
// decode threads do). ReadNext and Seek move the reader's one cursor: one thread at a time.
// A RecordWriter is not thread-safe. The free functions are.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/recordio_format.h"
#include "base/status.h"

namespace tally {

// ---- Framing (dmlc-core recordio) ------------------------------------------------------

// Appends `payload` framed as one record to *out: one part (cflag 0), or, where the magic
// word occurs 4-byte aligned inside the payload, parts split there with those 4 bytes
// dropped. Each part is padded with zeros to a multiple of 4.
// REQUIRES: payload.size() < 2^29 (dmlc-core's limit; RecordWriter::Write checks it).
void AppendRecord(std::string_view payload, std::string* out);

// Writes records to a new .rec file and remembers (key, offset) of each for the .idx.
class RecordWriter {
 public:
  // Creates (or truncates) `path`.
  static Status Open(const std::string& path, std::unique_ptr<RecordWriter>* out);
  ~RecordWriter();

  // Appends one record; *offset (if given) receives the byte offset of its first part.
  // `key` is the record's key in the .idx (im2rec uses the .lst index).
  Status Write(std::string_view payload, uint64_t key, uint64_t* offset = nullptr);
  // Flushes and closes the .rec; writes the .idx to `idx_path` unless it is empty.
  Status Close(const std::string& idx_path = "");

  uint64_t bytes_written() const { return offset_; }
  size_t records_written() const { return keys_.size(); }

 private:
  RecordWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
  uint64_t offset_ = 0;
  std::vector<uint64_t> keys_, offsets_;
  std::string buffer_;
};

// One line of a .idx file: `key\toffset\n`.
struct RecordIndexEntry {
  uint64_t key = 0;
  uint64_t offset = 0;
};

Status ReadIndexFile(const std::string& path, std::vector<RecordIndexEntry>* entries);
Status WriteIndexFile(const std::string& path, const std::vector<RecordIndexEntry>& entries);

// Reads records from a .rec file, sequentially or at byte offsets, optionally through a .idx.
class RecordReader {
 public:
  // Opens `rec_path`; with a non-empty `idx_path`, also loads the index and checks that each
  // offset lies inside the .rec on a 4-byte boundary.
  static Status Open(const std::string& rec_path, const std::string& idx_path,
                     std::unique_ptr<RecordReader>* out);
  ~RecordReader();

  // Reads the record whose first part starts at `offset` into *payload. *next_offset (if
  // given) receives the offset just past its last part. `index` only names the record in
  // error messages (-1: unknown). Thread-safe.
  Status ReadAt(uint64_t offset, std::string* payload, uint64_t* next_offset = nullptr,
                int64_t index = -1) const;
  // Finds the first offset >= `from` (rounded up to 4) holding the magic word followed by
  // cflag 0 or 1: where a record may start. Sets *offset to file_size() when there is none.
  // For resuming after a corrupt record (and for cutting a file without its .idx, as
  // dmlc-core's splitter does). Thread-safe.
  Status FindRecordStart(uint64_t from, uint64_t* offset) const;
  // Indexes a .rec that has no .idx: walks its records from the start, reading only their
  // part headers, and lists each in order (key = its position), as if an .idx did. Fails
  // on the first record that is not whole, naming it. REQUIRES: no index was loaded.
  Status IndexByScanning();
  // Reads the record of the i-th .idx line. REQUIRES: an index was loaded, i < num_indexed().
  Status ReadIndexed(size_t i, std::string* payload) const;

  // Reads the record at the cursor and moves past it; at the clean end of the file sets
  // *eof and returns Ok. Records are counted from the last Seek (0 from the start) to
  // name them in errors. After an error the cursor stays at the bad record.
  Status ReadNext(std::string* payload, bool* eof);
  void Seek(uint64_t offset, int64_t index = 0) {
    cursor_ = offset;
    cursor_index_ = index;
  }
  uint64_t cursor() const { return cursor_; }
  int64_t cursor_index() const { return cursor_index_; }

  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }
  size_t num_indexed() const { return index_.size(); }
  const std::vector<RecordIndexEntry>& index() const { return index_; }

 private:
  RecordReader(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), file_size_(size) {}
  Status Error(uint64_t offset, int64_t index, const std::string& what) const;
  std::string path_;
  int fd_;
  uint64_t file_size_;
  std::vector<RecordIndexEntry> index_;
  uint64_t cursor_ = 0;
  int64_t cursor_index_ = 0;
};

// ---- Image records (MXNet's IRHeader) ---------------------------------------------------

// The header at the start of an image record. flag > 0: `labels` holds flag labels written
// after the fixed 24 bytes, and `label` is 0 on disk (MXNet's convention for multi-label).
struct ImageRecordHeader {
  uint32_t flag = 0;
  float label = 0;
  uint64_t id = 0;
  uint64_t id2 = 0;
  std::vector<float> labels;

  // The labels of the record whichever way they were stored: `labels`, or {label}.
  std::vector<float> AllLabels() const;
};

// Returns header (+ labels) + image. With header.labels non-empty, flag is written as
// labels.size() and label as 0, whatever the fields hold.
std::string PackImageRecord(const ImageRecordHeader& header, std::string_view image);
// Splits a record payload into its header and the image bytes (a view into `payload`).
Status UnpackImageRecord(std::string_view payload, ImageRecordHeader* header, std::string_view* image);

// ---- List files (.lst) --------------------------------------------------------------------

// One line of a .lst file: `index\tlabel[\tlabel...]\tpath\n`.
struct ListEntry {
  uint64_t index = 0;
  std::vector<float> labels;
  std::string path;
};

Status ReadListFile(const std::string& path, std::vector<ListEntry>* entries);
// Writes labels as MXNet's im2rec does ("%f": 3.000000).
Status WriteListFile(const std::string& path, const std::vector<ListEntry>& entries);

}  // namespace tally
