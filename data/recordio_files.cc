// The text files beside a .rec (.idx and .lst) and MXNet's image record header.
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "data/recordio.h"
#include "data/recordio_internal.h"

namespace tally {

// Shows at most the start of a malformed line in an error message.
static std::string Quote(const std::string& line) {
  return "'" + (line.size() > 80 ? line.substr(0, 80) + "..." : line) + "'";
}

static bool ParseU64(const std::string& text, uint64_t* v) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = x;
  return true;
}

static bool ParseFloat(const std::string& text, float* v) {
  if (text.empty()) return false;
  char* end = nullptr;
  *v = std::strtof(text.c_str(), &end);
  return *end == '\0';
}

static void StripCr(std::string* line) {
  if (!line->empty() && line->back() == '\r') line->pop_back();
}

// Splits on tabs and spaces, dropping empty fields (MXNet's C++ reader reads .idx with >>).
static std::vector<std::string> SplitWhitespace(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// "PATH:LINE: byte OFFSET: FIELD: why, got 'line'": where in a text file a line went wrong.
static Status LineError(const std::string& path, size_t line_no, uint64_t offset, const std::string& field,
                        const std::string& why, const std::string& line) {
  return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": byte " + std::to_string(offset) + ": " +
                                 field + ": " + why + ", got " + Quote(line));
}

Status ReadIndexFile(const std::string& path, std::vector<RecordIndexEntry>* entries) {
  entries->clear();
  std::ifstream in(path);
  if (!in) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  std::string line;
  uint64_t next = 0;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    const uint64_t offset = next;  // of the line in the file
    next += line.size() + 1;
    StripCr(&line);
    std::vector<std::string> fields = SplitWhitespace(line);
    if (fields.empty()) continue;
    RecordIndexEntry e;
    const std::string record = "record " + std::to_string(entries->size());
    const std::string expected = "expected 'key<TAB>byte_offset'";
    if (fields.size() != 2) {
      return LineError(path, line_no, offset, record, std::to_string(fields.size()) + " fields, " + expected, line);
    }
    if (!ParseU64(fields[0], &e.key)) {
      return LineError(path, line_no, offset, record + "'s key", "not an unsigned 64-bit integer, " + expected, line);
    }
    if (!ParseU64(fields[1], &e.offset)) {
      return LineError(path, line_no, offset + line.find(fields[1], fields[0].size()), record + "'s byte_offset",
                       "not an unsigned 64-bit integer, " + expected, line);
    }
    entries->push_back(e);
  }
  if (in.bad()) return Status::IoError("reading " + path + " failed");
  return Status::Ok();
}

Status WriteIndexFile(const std::string& path, const std::vector<RecordIndexEntry>& entries) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
  for (const RecordIndexEntry& e : entries) std::fprintf(f, "%" PRIu64 "\t%" PRIu64 "\n", e.key, e.offset);
  bool failed = std::ferror(f) != 0;
  failed |= std::fclose(f) != 0;
  if (failed) return Status::IoError("writing " + path + " failed: " + std::strerror(errno));
  return Status::Ok();
}

Status ReadListFile(const std::string& path, std::vector<ListEntry>* entries) {
  entries->clear();
  std::ifstream in(path);
  if (!in) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  std::string line;
  uint64_t next = 0;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    const uint64_t offset = next;  // of the line in the file
    next += line.size() + 1;
    StripCr(&line);
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // Paths may hold spaces: fields are split on tabs only, as MXNet's im2rec does.
    std::vector<std::string> fields;
    std::vector<size_t> starts;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) {
      fields.push_back(line.substr(start, tab - start));
      starts.push_back(start);
    }
    fields.push_back(line.substr(start));
    starts.push_back(start);
    const std::string entry = "entry " + std::to_string(entries->size());
    const std::string expected = "expected 'index<TAB>label[<TAB>label...]<TAB>path'";
    ListEntry e;
    if (fields.size() < 3) {
      return LineError(path, line_no, offset, entry, std::to_string(fields.size()) + " fields, " + expected, line);
    }
    if (!ParseU64(fields[0], &e.index)) {
      return LineError(path, line_no, offset, entry + "'s index", "not an unsigned integer, " + expected,
                       line);
    }
    for (size_t i = 1; i + 1 < fields.size(); ++i) {
      float v;
      if (!ParseFloat(fields[i], &v)) {
        return LineError(path, line_no, offset + starts[i], entry + "'s label " + std::to_string(i - 1),
                         "not a number, " + expected, line);
      }
      e.labels.push_back(v);
    }
    if (fields.back().empty()) {
      return LineError(path, line_no, offset + starts.back(), entry + "'s path", "empty, " + expected,
                       line);
    }
    e.path = fields.back();
    entries->push_back(std::move(e));
  }
  if (in.bad()) return Status::IoError("reading " + path + " failed");
  return Status::Ok();
}

Status WriteListFile(const std::string& path, const std::vector<ListEntry>& entries) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
  for (const ListEntry& e : entries) {
    std::fprintf(f, "%" PRIu64, e.index);
    for (float l : e.labels) std::fprintf(f, "\t%f", l);
    std::fprintf(f, "\t%s\n", e.path.c_str());
  }
  bool failed = std::ferror(f) != 0;
  failed |= std::fclose(f) != 0;
  if (failed) return Status::IoError("writing " + path + " failed: " + std::strerror(errno));
  return Status::Ok();
}

std::vector<float> ImageRecordHeader::AllLabels() const {
  if (!labels.empty()) return labels;
  return {label};
}

std::string PackImageRecord(const ImageRecordHeader& header, std::string_view image) {
  std::string out;
  out.reserve(recordio::kImageHeaderBytes + 4 * header.labels.size() + image.size());
  const bool multi = !header.labels.empty();
  PutLe32(multi ? static_cast<uint32_t>(header.labels.size()) : header.flag, &out);
  PutLe32(FloatBits(multi ? 0.0f : header.label), &out);
  PutLe64(header.id, &out);
  PutLe64(header.id2, &out);
  for (float l : header.labels) PutLe32(FloatBits(l), &out);
  out.append(image.data(), image.size());
  return out;
}

Status UnpackImageRecord(std::string_view payload, ImageRecordHeader* header, std::string_view* image) {
  // The caller names the file and the record's offset; these name the byte in the record.
  if (payload.size() < recordio::kImageHeaderBytes) {
    return Status::InvalidArgument("byte 0 of the record: the image header: the record's " +
                                   std::to_string(payload.size()) + " bytes are shorter than its 24-byte header");
  }
  const char* p = payload.data();
  header->flag = GetLe32(p);
  header->label = BitsFloat(GetLe32(p + 4));
  header->id = GetLe64(p + 8);
  header->id2 = GetLe64(p + 16);
  header->labels.clear();
  size_t used = recordio::kImageHeaderBytes;
  if (header->flag > 0) {
    if (header->flag > recordio::kMaxLabels || used + 4ull * header->flag > payload.size()) {
      return Status::InvalidArgument("byte 0 of the record: the image header's flag: " +
                                     std::to_string(header->flag) + " labels, but the record holds only " +
                                     std::to_string(payload.size()) + " bytes (at most " +
                                     std::to_string(std::min<uint64_t>(recordio::kMaxLabels,
                                                                       (payload.size() - used) / 4)) +
                                     " labels)");
    }
    header->labels.resize(header->flag);
    for (uint32_t i = 0; i < header->flag; ++i) header->labels[i] = BitsFloat(GetLe32(p + used + 4 * i));
    used += 4ull * header->flag;
  }
  *image = payload.substr(used);
  return Status::Ok();
}

}  // namespace tally
