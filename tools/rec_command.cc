// tally rec: inspects a RecordIO pack. Prints the record count and each record's header;
// --verify checks the framing of every record, that the .idx points at record starts, and
// that every image decodes, listing bad records by index and byte offset.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <gflags/gflags.h>

#include "data/image_codec.h"
#include "data/recordio.h"
#include "tools/command.h"
#include "tools/data_tools.h"

DEFINE_bool(verify, false, "rec: check every record's framing and decode every image");
DEFINE_string(idx, "", "rec: the .idx file; default FILE.idx when it exists");
DEFINE_int64(show_records, 10, "rec: print the headers of this many records first; -1: all");
DECLARE_int32(num_thread);

namespace tally {
namespace {

const char kCmd[] = "tally rec";

std::string Labels(const ImageRecordHeader& h) {
  std::string out;
  for (float l : h.AllLabels()) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%g", out.empty() ? "" : ",", l);
    out += b;
  }
  return out;
}

void PrintHeaderRow() { std::printf("%10s %14s %6s %-16s %12s %12s\n", "record", "offset", "flag", "labels", "id", "image_bytes"); }

void PrintRecord(int64_t index, uint64_t offset, const std::string& payload) {
  ImageRecordHeader h;
  std::string_view image;
  Status s = UnpackImageRecord(payload, &h, &image);
  if (!s.ok()) {
    std::printf("%10" PRId64 " %14" PRIu64 "  not an image record (%zu bytes): %s\n", index, offset, payload.size(),
                s.message().c_str());
    return;
  }
  std::printf("%10" PRId64 " %14" PRIu64 " %6u %-16s %12" PRIu64 " %12zu\n", index, offset, h.flag, Labels(h).c_str(), h.id,
              image.size());
}

struct Pending {
  int64_t index;
  uint64_t offset;
  std::string payload;
  std::string error;
};

// Decodes a batch of records on --num-thread threads; fills in `error` for the bad ones.
void DecodeBatch(std::vector<Pending>* batch) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    Image image;
    DecodeOptions options;
    options.min_width = options.min_height = 1;  // every byte is still read; the IDCT is cheaper
    for (size_t i; (i = next++) < batch->size();) {
      Pending& p = (*batch)[i];
      ImageRecordHeader h;
      std::string_view bytes;
      Status s = UnpackImageRecord(p.payload, &h, &bytes);
      if (s.ok()) s = DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options, &image);
      if (!s.ok()) p.error = s.message();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < FLAGS_num_thread; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

int Inspect(RecordReader* reader) {
  const bool indexed = reader->num_indexed() > 0;
  std::string payload;
  PrintHeaderRow();
  int64_t shown = 0;
  if (indexed) {
    for (size_t i = 0; i < reader->num_indexed() && (FLAGS_show_records < 0 || shown < FLAGS_show_records); ++i, ++shown) {
      Status s = reader->ReadIndexed(i, &payload);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
        return 1;
      }
      PrintRecord(static_cast<int64_t>(i), reader->index()[i].offset, payload);
    }
    std::printf("%s: %zu records (from the .idx), %" PRIu64 " bytes\n", reader->path().c_str(), reader->num_indexed(),
                reader->file_size());
    return 0;
  }
  ProgressBar bar("scanning", reader->file_size());
  for (bool eof = false;;) {
    const uint64_t offset = reader->cursor();
    Status s = reader->ReadNext(&payload, &eof);
    if (!s.ok()) {
      bar.Finish();
      std::fprintf(stderr, "%s: %s (run --verify to list every bad record)\n", kCmd, s.ToString().c_str());
      return 1;
    }
    if (eof) break;
    if (FLAGS_show_records < 0 || shown < FLAGS_show_records) {
      PrintRecord(reader->cursor_index() - 1, offset, payload);
      ++shown;
    }
    bar.Update(reader->cursor());
  }
  bar.Finish();
  std::printf("%s: %" PRId64 " records, %" PRIu64 " bytes\n", reader->path().c_str(), reader->cursor_index(),
              reader->file_size());
  return 0;
}

int Verify(RecordReader* reader) {
  ProgressBar bar("verifying", reader->file_size());
  std::vector<uint64_t> starts;
  std::vector<Pending> batch;
  int64_t bad = 0, good = 0;
  std::vector<uint64_t> bad_offsets;
  auto report = [&](int64_t index, uint64_t offset, std::string what) {
    bar.Finish();
    // A reader's Status already names the file, record and offset; print them once.
    const std::string where = "at byte offset " + std::to_string(offset) + ": ";
    const size_t at = what.find(where);
    if (at != std::string::npos) what = what.substr(at + where.size());
    std::printf("bad record %" PRId64 " at byte offset %" PRIu64 ": %s\n", index, offset, what.c_str());
    bad_offsets.push_back(offset);
    ++bad;
  };
  auto flush = [&] {
    DecodeBatch(&batch);
    for (const Pending& p : batch) {
      if (p.error.empty()) ++good;
      else report(p.index, p.offset, p.error);
    }
    batch.clear();
  };
  const size_t batch_size = 128 * static_cast<size_t>(FLAGS_num_thread);
  int64_t index = 0;
  for (uint64_t offset = 0; offset < reader->file_size(); ++index) {
    Pending p{index, offset, {}, {}};
    uint64_t next = 0;
    Status s = reader->ReadAt(offset, &p.payload, &next, index);
    if (!s.ok()) {
      report(index, offset, s.message());
      // Resume at the next place a record may start, as dmlc-core's splitter would.
      s = reader->FindRecordStart(offset + recordio::kAlign, &next);
      if (!s.ok()) {
        report(index, offset, s.message());
        break;
      }
    } else {
      starts.push_back(offset);
      batch.push_back(std::move(p));
      if (batch.size() >= batch_size) flush();
    }
    offset = next;
    bar.Update(offset);
  }
  flush();
  // Every .idx line must point at the start of a record (bad ones are reported already).
  for (size_t i = 0; i < reader->num_indexed(); ++i) {
    const uint64_t off = reader->index()[i].offset;
    if (!std::binary_search(starts.begin(), starts.end(), off) &&
        std::find(bad_offsets.begin(), bad_offsets.end(), off) == bad_offsets.end()) {
      report(static_cast<int64_t>(i), off, ".idx line " + std::to_string(i + 1) + " (key " +
                                               std::to_string(reader->index()[i].key) +
                                               ") does not point at the start of a record");
    }
  }
  bar.Finish();
  std::printf("%s: %" PRId64 " records, %" PRId64 " good, %" PRId64 " bad (%.1f s)\n", reader->path().c_str(), index,
              good, bad, bar.seconds());
  return bad == 0 ? 0 : 1;
}

}  // namespace

int RecCommand(int argc, char** argv) {
  std::vector<std::string> args;
  TakePositionalArgs(&argc, argv, &args);
  ParseFlags(
      "tally rec FILE.rec [--idx FILE.idx] [--show-records N] [--verify [--num-thread N]]\n"
      "  prints the record count and each record's header (flag, labels, id, image bytes);\n"
      "  --verify checks every record's framing and decodes every image, listing bad records",
      &argc, &argv, {__FILE__});
  if (args.size() != 1) UsageError(kCmd, "expected one FILE.rec, got " + std::to_string(args.size()) + " arguments");
  if (FLAGS_num_thread < 1 || FLAGS_num_thread > 256) UsageError(kCmd, "--num-thread must be 1..256");
  const std::string& rec = args[0];
  std::string idx = FLAGS_idx;
  if (idx.empty()) {
    std::filesystem::path guess(rec);
    guess.replace_extension(".idx");
    if (std::filesystem::exists(guess)) idx = guess.string();
  }
  std::unique_ptr<RecordReader> reader;
  Status s = RecordReader::Open(rec, idx, &reader);
  if (!s.ok() && FLAGS_verify && !idx.empty()) {
    // A broken .idx is one of the findings; the records themselves are still checked.
    std::printf("bad index: %s\n", s.ToString().c_str());
    s = RecordReader::Open(rec, "", &reader);
    if (s.ok()) return std::max(1, Verify(reader.get()));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
    return 1;
  }
  return FLAGS_verify ? Verify(reader.get()) : Inspect(reader.get());
}

}  // namespace tally
