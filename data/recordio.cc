// RecordIO framing: the writer, the reader and AppendRecord. Layout: docs/recordio.md.
#include "data/recordio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "data/recordio_internal.h"

namespace tally {

using recordio::kMagic;

void AppendRecord(std::string_view payload, std::string* out) {
  const size_t size = payload.size();
  const char* data = payload.data();
  auto append_part = [out, data](uint32_t cflag, size_t begin, size_t end) {
    PutLe32(kMagic, out);
    PutLe32(recordio::EncodeLrec(cflag, static_cast<uint32_t>(end - begin)), out);
    out->append(data + begin, end - begin);
    out->append(recordio::PaddedLength(end - begin) - (end - begin), '\0');
  };
  // The magic word may only appear in a file where a part starts, so a reader can find
  // record boundaries by scanning. Where it occurs aligned in the payload, the part ends
  // there and the word is dropped; the reader puts it back between parts.
  size_t part_begin = 0;
  for (size_t i = 0; i + 4 <= size; i += 4) {
    if (GetLe32(data + i) != kMagic) continue;
    append_part(part_begin == 0 ? recordio::kCflagFirst : recordio::kCflagMiddle, part_begin, i);
    part_begin = i + 4;
  }
  append_part(part_begin == 0 ? recordio::kCflagWhole : recordio::kCflagLast, part_begin, size);
}

// ---- RecordWriter ---------------------------------------------------------------------------

Status RecordWriter::Open(const std::string& path, std::unique_ptr<RecordWriter>* out) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
  out->reset(new RecordWriter(path, f));
  return Status::Ok();
}

RecordWriter::~RecordWriter() {
  if (file_) std::fclose(file_);
}

Status RecordWriter::Write(std::string_view payload, uint64_t key, uint64_t* offset) {
  if (!file_) return Status::Internal(path_ + ": write after Close");
  if (payload.size() > recordio::kLengthMask) {
    return Status::InvalidArgument(path_ + ": record of " + std::to_string(payload.size()) +
                                   " bytes is too large for RecordIO (limit 2^29 - 1)");
  }
  buffer_.clear();
  AppendRecord(payload, &buffer_);
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
    return Status::IoError("write to " + path_ + " failed: " + std::strerror(errno));
  }
  if (offset) *offset = offset_;
  keys_.push_back(key);
  offsets_.push_back(offset_);
  offset_ += buffer_.size();
  return Status::Ok();
}

Status RecordWriter::Close(const std::string& idx_path) {
  if (!file_) return Status::Internal(path_ + ": closed twice");
  int flush_failed = std::fflush(file_);
  int close_failed = std::fclose(file_);
  file_ = nullptr;
  if (flush_failed || close_failed) return Status::IoError("closing " + path_ + " failed: " + std::strerror(errno));
  if (idx_path.empty()) return Status::Ok();
  std::vector<RecordIndexEntry> entries(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) entries[i] = {keys_[i], offsets_[i]};
  return WriteIndexFile(idx_path, entries);
}

// ---- RecordReader ---------------------------------------------------------------------------

Status RecordReader::Open(const std::string& rec_path, const std::string& idx_path,
                          std::unique_ptr<RecordReader>* out) {
  int fd = ::open(rec_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("cannot open " + rec_path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::IoError("cannot stat " + rec_path + ": " + std::strerror(e));
  }
  std::unique_ptr<RecordReader> reader(new RecordReader(rec_path, fd, static_cast<uint64_t>(st.st_size)));
  if (!idx_path.empty()) {
    TALLY_RETURN_IF_ERROR(ReadIndexFile(idx_path, &reader->index_));
    for (size_t i = 0; i < reader->index_.size(); ++i) {
      uint64_t off = reader->index_[i].offset;
      // Written so that no offset near 2^64 wraps around to look small.
      if (off % recordio::kAlign != 0 || off > reader->file_size_ ||
          reader->file_size_ - off < recordio::kPartHeaderBytes) {
        return Status::InvalidArgument(idx_path + ": record " + std::to_string(i) + " (key " +
                                       std::to_string(reader->index_[i].key) + ") has byte offset " +
                                       std::to_string(off) + ", not a 4-byte aligned offset inside " +
                                       rec_path + " (" + std::to_string(reader->file_size_) + " bytes)");
      }
    }
  }
  *out = std::move(reader);
  return Status::Ok();
}

RecordReader::~RecordReader() { ::close(fd_); }

Status RecordReader::Error(uint64_t offset, int64_t index, const std::string& what) const {
  std::string where = path_ + ": ";
  if (index >= 0) where += "record " + std::to_string(index) + " ";
  where += "at byte offset " + std::to_string(offset) + ": ";
  return Status::InvalidArgument(where + what);
}

static bool PreadFull(int fd, void* buf, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

Status RecordReader::IndexByScanning() {
  if (!index_.empty()) return Status::Internal(path_ + " is indexed already");
  uint64_t pos = 0;
  while (pos < file_size_) {
    const uint64_t start = pos;
    const int64_t i = static_cast<int64_t>(index_.size());
    for (int part = 0;; ++part) {
      char header[recordio::kPartHeaderBytes];
      if (pos + sizeof header > file_size_ || !PreadFull(fd_, header, sizeof header, pos)) {
        return Error(start, i, "truncated: the file ends inside a part header at byte " + std::to_string(pos));
      }
      const uint32_t lrec = GetLe32(header + 4), cflag = recordio::LrecCflag(lrec);
      const bool starts = cflag == recordio::kCflagWhole || cflag == recordio::kCflagFirst;
      if (GetLe32(header) != kMagic || starts != (part == 0)) {
        return Error(start, i, "no record part at byte " + std::to_string(pos) + " (bad magic or cflag)");
      }
      pos += recordio::kPartHeaderBytes + recordio::PaddedLength(recordio::LrecLength(lrec));
      if (pos > file_size_) return Error(start, i, "truncated: a part runs past the end of the file");
      if (cflag == recordio::kCflagWhole || cflag == recordio::kCflagLast) break;
    }
    index_.push_back({static_cast<uint64_t>(i), start});
  }
  return Status::Ok();
}

Status RecordReader::ReadAt(uint64_t offset, std::string* payload, uint64_t* next_offset, int64_t index) const {
  payload->clear();
  uint64_t pos = offset;
  for (int part = 0;; ++part) {
    const std::string part_at = part == 0 ? "" : "part " + std::to_string(part) + " at byte " + std::to_string(pos) + ": ";
    if (pos % recordio::kAlign != 0) return Error(offset, index, "offset is not a multiple of 4");
    // Written so that an offset near 2^64 (ReadAt takes any) cannot wrap around to look small.
    if (pos > file_size_ || file_size_ - pos < recordio::kPartHeaderBytes) {
      return Error(offset, index, part_at + "truncated: the file (" + std::to_string(file_size_) +
                                      " bytes) ends before this 8-byte part header");
    }
    char header[recordio::kPartHeaderBytes];
    if (!PreadFull(fd_, header, sizeof header, pos)) {
      return Error(offset, index, part_at + "read failed: " + std::strerror(errno));
    }
    const uint32_t magic = GetLe32(header), lrec = GetLe32(header + 4);
    if (magic != kMagic) {
      char hex[64];
      std::snprintf(hex, sizeof hex, "bad magic 0x%08x (expected 0x%08x)", magic, kMagic);
      return Error(offset, index, part_at + hex);
    }
    const uint32_t cflag = recordio::LrecCflag(lrec), length = recordio::LrecLength(lrec);
    const bool starts = cflag == recordio::kCflagWhole || cflag == recordio::kCflagFirst;
    if (part == 0 && !starts) {
      return Error(offset, index, "record starts with cflag " + std::to_string(cflag) + " (expected 0 or 1)");
    }
    if (part > 0 && starts) {
      return Error(offset, index, part_at + "cflag " + std::to_string(cflag) +
                                      " inside a multi-part record (expected 2 or 3)");
    }
    const uint64_t total = payload->size() + (part > 0 ? 4 : 0) + uint64_t{length};
    if (total > recordio::kMaxRecordBytes) {
      return Error(offset, index, part_at + "record length " + std::to_string(total) + " exceeds the cap of " +
                                      std::to_string(recordio::kMaxRecordBytes) + " bytes");
    }
    const uint64_t body = pos + recordio::kPartHeaderBytes;
    if (body + recordio::PaddedLength(length) > file_size_) {
      return Error(offset, index, part_at + "truncated: the part declares " + std::to_string(length) +
                                      " bytes but the file ends " + std::to_string(file_size_ - body) +
                                      " bytes after its header");
    }
    if (part > 0) PutLe32(kMagic, payload);
    const size_t start = payload->size();
    payload->resize(start + length);
    if (length > 0 && !PreadFull(fd_, payload->data() + start, length, body)) {
      return Error(offset, index, part_at + "read failed: " + std::strerror(errno));
    }
    pos = body + recordio::PaddedLength(length);
    if (cflag == recordio::kCflagWhole || cflag == recordio::kCflagLast) break;
  }
  if (next_offset) *next_offset = pos;
  return Status::Ok();
}

Status RecordReader::FindRecordStart(uint64_t from, uint64_t* offset) const {
  uint64_t pos = recordio::PaddedLength(from);
  std::string buf(1 << 16, '\0');
  while (pos + recordio::kPartHeaderBytes <= file_size_) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), file_size_ - pos));
    if (!PreadFull(fd_, buf.data(), n, pos)) return Error(pos, -1, std::string("read failed: ") + std::strerror(errno));
    // Headers straddling the buffer's end are looked at again by the next read.
    size_t i = 0;
    for (; i + recordio::kPartHeaderBytes <= n; i += recordio::kAlign) {
      if (GetLe32(buf.data() + i) != kMagic) continue;
      const uint32_t cflag = recordio::LrecCflag(GetLe32(buf.data() + i + 4));
      if (cflag == recordio::kCflagWhole || cflag == recordio::kCflagFirst) {
        *offset = pos + i;
        return Status::Ok();
      }
    }
    pos += i;
  }
  *offset = file_size_;
  return Status::Ok();
}

Status RecordReader::ReadIndexed(size_t i, std::string* payload) const {
  return ReadAt(index_.at(i).offset, payload, nullptr, static_cast<int64_t>(i));
}

Status RecordReader::ReadNext(std::string* payload, bool* eof) {
  *eof = cursor_ >= file_size_;
  if (*eof) {
    payload->clear();
    return Status::Ok();
  }
  uint64_t next = 0;
  TALLY_RETURN_IF_ERROR(ReadAt(cursor_, payload, &next, cursor_index_));
  cursor_ = next;
  ++cursor_index_;
  return Status::Ok();
}

}  // namespace tally
