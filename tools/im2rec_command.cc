// tally im2rec: MXNet's im2rec.py. List mode writes .lst files from a folder of images; pack
// mode packs every PREFIX*.lst into .rec + .idx. Options keep MXNet's names.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include <gflags/gflags.h>

#include "data/recordio.h"
#include "tools/command.h"
#include "tools/data_tools.h"
#include "tools/im2rec.h"
#include "tools/python_random.h"

DEFINE_bool(list, false, "list mode: write PREFIX.lst (or PREFIX_train/_val/_test.lst) from the images under ROOT");
DEFINE_bool(recursive, false, "list mode: each folder under ROOT is a class, labelled in sorted order");
DEFINE_string(exts, ".jpeg,.jpg,.png", "list mode: file extensions to list (case-insensitive)");
DEFINE_double(train_ratio, 1.0, "list mode: fraction of the images in the training list");
DEFINE_double(test_ratio, 0.0, "list mode: fraction of the images in the test list");
DEFINE_bool(no_shuffle, false, "list mode: keep the listing order instead of shuffling as Python's random.seed(100)");
DEFINE_int32(chunks, 1, "list mode: cut the list into N chunks, each split and written as PREFIX_i*.lst");
DEFINE_int32(resize, 0, "pack mode: resize the shorter edge to this many pixels; 0 keeps the size");
DEFINE_bool(center_crop, false, "pack mode: crop the centre square before resizing");
DEFINE_int32(quality, 95, "pack mode: JPEG quality 1..100 (for .png MXNet's 0..9 level is accepted and ignored)");
DEFINE_string(encoding, ".jpg", "pack mode: .jpg or .png");
DEFINE_bool(pass_through, false, "pack mode: pack each file's bytes unchanged (they are still checked to decode)");
DEFINE_int32(color, 1,
             "pack mode: cv2.imread's flag: 1 colour, 0 greyscale (one-channel images), -1 as stored "
             "(grey stays grey; alpha and 16-bit are refused)");
DEFINE_bool(pack_label, false, "pack mode: store every label of a .lst line (multi-label header)");
DEFINE_int32(num_thread, 1, "threads that read and encode images (im2rec) or decode them (rec --verify)");

namespace tally {
namespace fs = std::filesystem;

namespace {

const char kCmd[] = "tally im2rec";

bool IsDefault(const char* flag) { return gflags::GetCommandLineFlagInfoOrDie(flag).is_default; }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Appends the images of `dir` (files first, then subfolders, each sorted: os.walk's order
// with im2rec.py's dirs.sort() and files.sort()). A folder's label is the number of folders
// that held an image before it, so folders without images take no label.
void Walk(const fs::path& root, const fs::path& dir, bool recursive, const std::vector<std::string>& exts,
          std::map<std::string, int>* classes, std::vector<ListEntry>* out) {
  std::vector<fs::path> files, dirs;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec)) dirs.push_back(e.path());
    else if (e.is_regular_file(ec)) files.push_back(e.path());
  }
  if (ec) std::fprintf(stderr, "%s: cannot list %s: %s\n", kCmd, dir.c_str(), ec.message().c_str());
  std::sort(files.begin(), files.end());
  std::sort(dirs.begin(), dirs.end());
  // Paths relative to ROOT as os.path.relpath makes them: by the names walked, not through
  // symlinks (a class folder may be a link; os.walk follows it, as directory_iterator does).
  const std::string rel_dir = dir.lexically_relative(root).generic_string();
  for (const fs::path& f : files) {
    if (std::find(exts.begin(), exts.end(), Lower(f.extension().string())) == exts.end()) continue;
    int label = 0;
    if (recursive) {
      auto it = classes->emplace(rel_dir, static_cast<int>(classes->size())).first;
      label = it->second;
    }
    out->push_back({out->size(), {static_cast<float>(label)}, f.lexically_relative(root).generic_string()});
  }
  if (!recursive) return;
  for (const fs::path& d : dirs) Walk(root, d, recursive, exts, classes, out);
}

using NamedList = std::pair<std::string, std::vector<ListEntry>>;

// im2rec.py's make_list: the list is cut into --chunks chunks of ceil(N / chunks) images
// (the last one shorter, or even empty), and each chunk into test, train and val parts. The
// parts' sizes come from the full chunk size, not the chunk's own length, so a short last
// chunk loses val images first; Python's slices stop at the end, hence the clamps.
std::vector<NamedList> SplitLists(const std::string& prefix, const std::vector<ListEntry>& items) {
  const size_t n = items.size(), chunks = static_cast<size_t>(FLAGS_chunks);
  const size_t chunk_size = (n + chunks - 1) / chunks;
  // int(chunk_size * ratio): a double product truncated, as Python computes it.
  const size_t n_train = static_cast<size_t>(static_cast<double>(chunk_size) * FLAGS_train_ratio);
  const size_t n_test = static_cast<size_t>(static_cast<double>(chunk_size) * FLAGS_test_ratio);
  std::vector<NamedList> lists;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = std::min(n, c * chunk_size), end = std::min(n, (c + 1) * chunk_size);
    auto slice = [&](size_t b, size_t e) {
      b = std::min(begin + b, end);
      e = std::min(begin + e, end);
      return std::vector<ListEntry>(items.begin() + b, items.begin() + e);
    };
    const std::string stem = prefix + (chunks > 1 ? "_" + std::to_string(c) : "");
    if (FLAGS_train_ratio == 1.0) {
      lists.push_back({stem + ".lst", slice(0, chunk_size)});
      continue;
    }
    if (FLAGS_test_ratio > 0) lists.push_back({stem + "_test.lst", slice(0, n_test)});
    if (FLAGS_train_ratio + FLAGS_test_ratio < 1.0) {
      lists.push_back({stem + "_val.lst", slice(n_test + n_train, chunk_size)});
    }
    lists.push_back({stem + "_train.lst", slice(n_test, n_test + n_train)});
  }
  return lists;
}

int ListMode(const std::string& prefix, const std::string& root) {
  std::vector<std::string> exts;
  std::stringstream ss(FLAGS_exts);
  for (std::string e; std::getline(ss, e, ',');) {
    if (e.empty()) continue;
    exts.push_back(Lower(e[0] == '.' ? e : "." + e));
  }
  if (exts.empty()) UsageError(kCmd, "--exts '" + FLAGS_exts + "' names no extension");
  if (!fs::is_directory(root)) UsageError(kCmd, "ROOT '" + root + "' is not a folder");
  std::map<std::string, int> classes;
  std::vector<ListEntry> items;
  Walk(root, root, FLAGS_recursive, exts, &classes, &items);
  if (FLAGS_recursive) {
    std::vector<std::pair<int, std::string>> by_label;
    for (const auto& [name, label] : classes) by_label.push_back({label, name});
    std::sort(by_label.begin(), by_label.end());
    for (const auto& [label, name] : by_label) std::printf("%s %d\n", name.c_str(), label);
  }
  if (!FLAGS_no_shuffle) PythonRandom(100).Shuffle(&items);  // random.seed(100); random.shuffle
  const size_t n = items.size();
  const std::vector<NamedList> lists = SplitLists(prefix, items);
  for (const auto& [path, entries] : lists) {
    Status s = WriteListFile(path, entries);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "%s: wrote %zu images to %s\n", kCmd, entries.size(), path.c_str());
  }
  std::fprintf(stderr, "%s: listed %zu images in %zu classes under %s\n", kCmd, n,
               FLAGS_recursive ? classes.size() : size_t{n > 0}, root.c_str());
  return 0;
}

// Packs one .lst; returns the number of images left out, or -1 when the pack failed.
int64_t PackList(const std::string& lst, const std::string& root, const PackOptions& options) {
  std::vector<ListEntry> items;
  Status s = ReadListFile(lst, &items);
  const std::string base = lst.substr(0, lst.size() - 4);
  std::unique_ptr<RecordWriter> writer;
  if (s.ok()) s = RecordWriter::Open(base + ".rec", &writer);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
    return -1;
  }
  ProgressBar bar("packing " + fs::path(lst).filename().string(), items.size());
  const size_t chunk = 64 * static_cast<size_t>(FLAGS_num_thread);
  std::vector<std::string> images(chunk);
  std::vector<Status> results(chunk);
  int64_t skipped = 0;
  for (size_t begin = 0; begin < items.size(); begin += chunk) {
    const size_t count = std::min(chunk, items.size() - begin);
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next++) < count;) {
        results[i] = PrepareImage((fs::path(root) / items[begin + i].path).string(), options, &images[i]);
      }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < FLAGS_num_thread; ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < count; ++i) {
      const ListEntry& item = items[begin + i];
      if (!results[i].ok()) {
        bar.Finish();
        std::fprintf(stderr, "%s: left out %s (line %zu of %s): %s\n", kCmd, item.path.c_str(), begin + i + 1,
                     lst.c_str(), results[i].message().c_str());
        ++skipped;
        continue;
      }
      ImageRecordHeader header;
      header.id = item.index;
      if (FLAGS_pack_label && item.labels.size() > 1) header.labels = item.labels;
      else header.label = item.labels[0];
      s = writer->Write(PackImageRecord(header, images[i]), item.index);
      if (!s.ok()) {
        bar.Finish();
        std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
        return -1;
      }
    }
    bar.Update(begin + count);
  }
  bar.Finish();
  const size_t packed = writer->records_written();
  const double mb = writer->bytes_written() / 1e6;
  s = writer->Close(base + ".idx");
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
    return -1;
  }
  std::fprintf(stderr, "%s: packed %zu of %zu images into %s.rec (%.1f MB, %.1f s); %lld left out\n", kCmd, packed,
               items.size(), base.c_str(), mb, bar.seconds(), static_cast<long long>(skipped));
  return skipped;
}

int PackMode(const std::string& prefix, const std::string& root) {
  PackOptions options;
  options.resize = FLAGS_resize;
  options.center_crop = FLAGS_center_crop;
  options.quality = FLAGS_quality;
  options.encoding = FLAGS_encoding;
  options.pass_through = FLAGS_pass_through;
  options.color = FLAGS_color;
  // As im2rec.py: PREFIX may be one .lst, or a path prefix of several (PREFIX_train.lst, ...).
  std::vector<std::string> lists;
  if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ".lst") == 0 && fs::is_regular_file(prefix)) {
    lists.push_back(prefix);
  } else {
    const fs::path p(prefix);
    const bool is_dir = fs::is_directory(p);
    const fs::path dir = is_dir ? p : (p.parent_path().empty() ? fs::path(".") : p.parent_path());
    const std::string stem = is_dir ? "" : p.filename().string();
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file(ec) && name.rfind(stem, 0) == 0 && name.size() > 4 &&
          name.compare(name.size() - 4, 4, ".lst") == 0) {
        lists.push_back((dir / name).string());
      }
    }
    std::sort(lists.begin(), lists.end());
  }
  if (lists.empty()) {
    std::fprintf(stderr, "%s: no list file %s*.lst; make one first with --list\n", kCmd, prefix.c_str());
    return 1;
  }
  int64_t skipped = 0;
  for (const std::string& lst : lists) {
    int64_t s = PackList(lst, root, options);
    if (s < 0) return 1;
    skipped += s;
  }
  return 0;
}

// Flags that belong to the other mode, or that contradict each other, stop the run.
void CheckFlags() {
  const std::vector<const char*> list_only = {"recursive", "exts", "train_ratio", "test_ratio", "no_shuffle", "chunks"};
  const std::vector<const char*> pack_only = {"resize",       "center_crop", "quality", "encoding",
                                              "pass_through", "pack_label",  "color"};
  auto dashed = [](std::string f) {
    std::replace(f.begin(), f.end(), '_', '-');
    return "--" + f;
  };
  for (const char* f : FLAGS_list ? pack_only : list_only) {
    if (!IsDefault(f)) {
      UsageError(kCmd, dashed(f) + (FLAGS_list ? " applies to pack mode, not to --list" : " applies to --list only"));
    }
  }
  if (FLAGS_num_thread < 1 || FLAGS_num_thread > 256) UsageError(kCmd, "--num-thread must be 1..256");
  if (FLAGS_list) {
    if (!(FLAGS_train_ratio > 0 && FLAGS_train_ratio <= 1)) UsageError(kCmd, "--train-ratio must be in (0, 1]");
    if (!(FLAGS_test_ratio >= 0 && FLAGS_test_ratio < 1)) UsageError(kCmd, "--test-ratio must be in [0, 1)");
    if (FLAGS_train_ratio + FLAGS_test_ratio > 1 + 1e-9) {
      UsageError(kCmd, "--train-ratio plus --test-ratio exceeds 1");
    }
    if (FLAGS_chunks < 1) UsageError(kCmd, "--chunks must be at least 1");
    if (FLAGS_train_ratio == 1.0 && FLAGS_test_ratio > 0) {
      UsageError(kCmd, "--test-ratio needs --train-ratio below 1 (the training list takes every image)");
    }
    return;
  }
  if (FLAGS_encoding != ".jpg" && FLAGS_encoding != ".png") {
    UsageError(kCmd, "--encoding '" + FLAGS_encoding + "': expected .jpg or .png");
  }
  if (FLAGS_resize < 0) UsageError(kCmd, "--resize must be >= 0");
  if (FLAGS_color < -1 || FLAGS_color > 1) {
    UsageError(kCmd, "--color " + std::to_string(FLAGS_color) +
                         ": expected 1 (colour), 0 (greyscale) or -1 (as stored)");
  }
  if (FLAGS_encoding == ".jpg" && (FLAGS_quality < 1 || FLAGS_quality > 100)) {
    UsageError(kCmd, "--quality must be 1..100 for .jpg");
  }
  if (FLAGS_encoding == ".png" && !IsDefault("quality") && (FLAGS_quality < 0 || FLAGS_quality > 9)) {
    UsageError(kCmd, "--quality for .png is MXNet's compression level 0..9");
  }
  if (FLAGS_pass_through) {
    for (const char* f : {"resize", "center_crop", "quality", "encoding", "color"}) {
      if (!IsDefault(f)) UsageError(kCmd, dashed(f) + " contradicts --pass-through (which packs files unchanged)");
    }
  }
}

}  // namespace

int Im2recCommand(int argc, char** argv) {
  std::vector<std::string> args;
  TakePositionalArgs(&argc, argv, &args);
  ParseFlags(
      "tally im2rec PREFIX ROOT [flags]\n"
      "  --list: write PREFIX.lst listing the images under ROOT (--recursive: one class per folder)\n"
      "  otherwise: pack every PREFIX*.lst into .rec + .idx, reading images from ROOT",
      &argc, &argv, {__FILE__});
  if (args.size() != 2) {
    UsageError(kCmd, "expected PREFIX ROOT, got " + std::to_string(args.size()) + " arguments (see --help)");
  }
  CheckFlags();
  return FLAGS_list ? ListMode(args[0], args[1]) : PackMode(args[0], args[1]);
}

}  // namespace tally
