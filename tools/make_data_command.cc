// tally make-data: data sets made here from what Debian ships, for tests and benchmarks.
//   fashion-mnist:  Debian's dataset-fashion-mnist (IDX files) -> train/test .rec + .idx
//   synthetic-jpeg: a folder tree class_NNN/img_NNNNN.jpg of procedural colour images
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gflags/gflags.h>

#include "data/image_codec.h"
#include "data/recordio.h"
#include "tools/command.h"
#include "tools/data_tools.h"

DEFINE_string(out, "", "make-data: the output folder (created if missing); export: the output file");
DEFINE_string(fashion_mnist_dir, "/usr/share/datasets/fashion-mnist",
              "make-data fashion-mnist: where Debian's dataset-fashion-mnist puts its IDX files");
DEFINE_int64(limit, -1, "make-data fashion-mnist: convert only the first N images of each split; -1: all");
DEFINE_int32(classes, 10, "make-data synthetic-jpeg: number of classes");
DEFINE_int32(per_class, 20, "make-data synthetic-jpeg: images per class");
DECLARE_int32(quality);
DECLARE_int32(num_thread);
DECLARE_uint64(seed);

namespace tally {
namespace fs = std::filesystem;
namespace {

const char kCmd[] = "tally make-data";

uint32_t BigEndian32(const unsigned char* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

// Reads an IDX file (gzipped or not; zlib reads both): magic 0x0000080N, N big-endian u32
// dimensions, then u8 data. Checks the sizes against the file before trusting them.
Status ReadIdxFile(const std::string& path, int want_dims, std::vector<uint32_t>* dims, std::vector<uint8_t>* data) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::IoError("cannot open " + path + " (install Debian's dataset-fashion-mnist)");
  std::string all;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (err != Z_OK && err != Z_STREAM_END) return Status::IoError(path + ": " + msg);
  const auto* p = reinterpret_cast<const unsigned char*>(all.data());
  const size_t header = 4 + 4 * static_cast<size_t>(want_dims);
  if (all.size() < header || BigEndian32(p) != 0x800u + static_cast<uint32_t>(want_dims)) {
    return Status::InvalidArgument(path + ": not an IDX file of u8 with " + std::to_string(want_dims) + " dimensions");
  }
  uint64_t count = 1;
  dims->clear();
  for (int d = 0; d < want_dims; ++d) {
    dims->push_back(BigEndian32(p + 4 + 4 * d));
    count *= dims->back();
  }
  if (all.size() - header != count) {
    return Status::InvalidArgument(path + ": declares " + std::to_string(count) + " values but holds " +
                                   std::to_string(all.size() - header));
  }
  data->assign(p + header, p + all.size());
  return Status::Ok();
}

Status ConvertFashionSplit(const std::string& split, const std::string& out_dir, int64_t* written, int64_t* total) {
  const std::string dir = FLAGS_fashion_mnist_dir + "/";
  std::vector<uint32_t> image_dims, label_dims;
  std::vector<uint8_t> pixels, labels;
  TALLY_RETURN_IF_ERROR(ReadIdxFile(dir + split + "-images-idx3-ubyte.gz", 3, &image_dims, &pixels));
  TALLY_RETURN_IF_ERROR(ReadIdxFile(dir + split + "-labels-idx1-ubyte.gz", 1, &label_dims, &labels));
  if (image_dims[0] != label_dims[0]) {
    return Status::InvalidArgument(dir + split + ": " + std::to_string(image_dims[0]) + " images but " +
                                   std::to_string(label_dims[0]) + " labels");
  }
  int64_t n = image_dims[0];
  *total = n;
  if (FLAGS_limit >= 0) n = std::min<int64_t>(n, FLAGS_limit);
  const std::string base = out_dir + "/" + (split == "t10k" ? "test" : "train");
  std::unique_ptr<RecordWriter> writer;
  TALLY_RETURN_IF_ERROR(RecordWriter::Open(base + ".rec", &writer));
  const int h = static_cast<int>(image_dims[1]), w = static_cast<int>(image_dims[2]);
  ProgressBar bar("fashion-mnist " + split, static_cast<uint64_t>(n));
  Image image;
  std::string png;
  for (int64_t i = 0; i < n; ++i) {
    // Grayscale stored as RGB with three equal channels: the codec's images are RGB, and a
    // PNG of equal channels costs little more than a gray one.
    image.Resize(h, w);
    const uint8_t* src = pixels.data() + static_cast<size_t>(i) * h * w;
    for (int k = 0; k < h * w; ++k) std::memset(image.pixels.data() + 3 * k, src[k], 3);
    TALLY_RETURN_IF_ERROR(EncodePng(image, &png));
    ImageRecordHeader header;
    header.label = labels[i];
    header.id = static_cast<uint64_t>(i);
    TALLY_RETURN_IF_ERROR(writer->Write(PackImageRecord(header, png), static_cast<uint64_t>(i)));
    bar.Update(static_cast<uint64_t>(i + 1));
  }
  bar.Finish();
  TALLY_RETURN_IF_ERROR(writer->Close(base + ".idx"));
  *written = n;
  return Status::Ok();
}

int FashionMnist(const std::string& out_dir) {
  for (const char* split : {"train", "t10k"}) {
    int64_t n = 0, total = 0;
    Status s = ConvertFashionSplit(split, out_dir, &n, &total);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "%s: wrote %lld of %lld images to %s/%s.rec (28x28 PNG, lossless)\n", kCmd,
                 static_cast<long long>(n), static_cast<long long>(total), out_dir.c_str(),
                 std::strcmp(split, "t10k") == 0 ? "test" : "train");
  }
  return 0;
}

// A small deterministic generator (splitmix64): the same images for a seed on any platform,
// which std's distributions do not promise.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1)); }
};

// The colour of hue `h` in [0, 1) at full saturation, scaled by `v`.
void Hue(double h, double v, double rgb[3]) {
  for (int c = 0; c < 3; ++c) {
    // The HSV hexcone: each channel is a trapezoid over the hue circle, offset by a third.
    double x = std::fabs(std::fmod(h * 6 + 4 - 2 * c + 6, 6.0) - 3) - 1;
    rgb[c] = v * std::min(1.0, std::max(0.0, x));
  }
}

// One image of class `label`: a two-colour gradient in the class's hue, a shape whose kind
// and colour depend on the class (disc, box, stripes or ring), placed and sized at random,
// plus noise. The class shows in colour and shape, so a small network can learn it.
void SyntheticImage(int label, int num_classes, Rng* rng, Image* image) {
  const bool portrait = rng->Uniform() < 0.25;
  int w = rng->Int(440, 560), h = w * 3 / 4 + rng->Int(-30, 30);
  if (portrait) std::swap(w, h);
  image->Resize(h, w);
  const double hue = (label + 0.3 * rng->Uniform()) / num_classes;
  double a[3], b[3], fg[3];
  Hue(hue, 0.9, a);
  Hue(std::fmod(hue + 0.5, 1.0), 0.35, b);
  Hue(std::fmod(hue + 0.25 + 0.1 * (label % 3), 1.0), 1.0, fg);
  const double angle = rng->Uniform() * 6.2831853, dx = std::cos(angle), dy = std::sin(angle);
  const int kind = label % 4;
  const double cx = w * (0.3 + 0.4 * rng->Uniform()), cy = h * (0.3 + 0.4 * rng->Uniform());
  const double r = std::min(w, h) * (0.15 + 0.15 * rng->Uniform());
  const double period = 12 + 4 * (label % 5);
  uint64_t noise = rng->Next() | 1;
  for (int y = 0; y < h; ++y) {
    uint8_t* row = image->row(y);
    for (int x = 0; x < w; ++x) {
      const double t = 0.5 + 0.5 * ((x - w / 2.0) * dx + (y - h / 2.0) * dy) / (0.5 * std::hypot(w, h));
      const double ex = x - cx, ey = y - cy, d = std::hypot(ex, ey);
      bool inside = false;
      if (kind == 0) inside = d < r;
      else if (kind == 1) inside = std::fabs(ex) < r && std::fabs(ey) < 0.6 * r;
      else if (kind == 2) inside = std::fabs(ex) < 1.3 * r && std::fabs(ey) < r && std::fmod(x + 1000.0, period) < period / 2;
      else inside = d < r && d > 0.6 * r;
      for (int c = 0; c < 3; ++c) {
        noise = noise * 6364136223846793005ull + 1442695040888963407ull;
        const double n = static_cast<double>(noise >> 59) - 15.5;  // about +-16
        const double v = 255 * (inside ? fg[c] : a[c] * (1 - t) + b[c] * t) + n;
        row[3 * x + c] = static_cast<uint8_t>(std::min(255.0, std::max(0.0, v)));
      }
    }
  }
}

int SyntheticJpeg(const std::string& out_dir) {
  if (FLAGS_classes < 1 || FLAGS_classes > 100000) UsageError(kCmd, "--classes must be 1..100000");
  if (FLAGS_per_class < 1) UsageError(kCmd, "--per-class must be >= 1");
  const int quality = gflags::GetCommandLineFlagInfoOrDie("quality").is_default ? 90 : FLAGS_quality;
  if (quality < 1 || quality > 100) UsageError(kCmd, "--quality must be 1..100");
  const int64_t total = int64_t{FLAGS_classes} * FLAGS_per_class;
  ProgressBar bar("synthetic-jpeg", static_cast<uint64_t>(total));
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  auto work = [&](bool main_thread) {
    Image image;
    std::string jpeg;
    for (int64_t i; !failed && (i = next++) < total;) {
      const int label = static_cast<int>(i / FLAGS_per_class), k = static_cast<int>(i % FLAGS_per_class);
      Rng rng{FLAGS_seed * 0x100000001B3ull + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + 1};
      SyntheticImage(label, FLAGS_classes, &rng, &image);
      char name[64];
      std::snprintf(name, sizeof name, "class_%03d/img_%05d.jpg", label, k);
      const fs::path path = fs::path(out_dir) / name;
      std::error_code ec;
      fs::create_directories(path.parent_path(), ec);
      Status s = EncodeJpeg(image, quality, &jpeg);
      std::ofstream f(path, std::ios::binary);
      if (s.ok() && !(f << jpeg)) s = Status::IoError("cannot write " + path.string());
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", kCmd, s.ToString().c_str());
        failed = true;
      }
      ++done;
      if (main_thread) bar.Update(static_cast<uint64_t>(done.load()));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < FLAGS_num_thread; ++t) threads.emplace_back(work, false);
  work(true);
  for (std::thread& t : threads) t.join();
  bar.Finish();
  if (failed) return 1;
  std::fprintf(stderr, "%s: wrote %lld JPEGs (quality %d) in %d classes under %s (%.1f s)\n", kCmd,
               static_cast<long long>(total), quality, FLAGS_classes, out_dir.c_str(), bar.seconds());
  return 0;
}

}  // namespace

int MakeDataCommand(int argc, char** argv) {
  std::vector<std::string> args;
  TakePositionalArgs(&argc, argv, &args);
  ParseFlags(
      "tally make-data fashion-mnist --out DIR [--limit N]\n"
      "tally make-data synthetic-jpeg --out DIR [--classes 10] [--per-class 20] [--seed 0] [--quality 90]",
      &argc, &argv, {__FILE__});
  if (args.size() != 1 || (args[0] != "fashion-mnist" && args[0] != "synthetic-jpeg")) {
    UsageError(kCmd, "expected one data set: fashion-mnist or synthetic-jpeg (see --help)");
  }
  if (FLAGS_out.empty()) UsageError(kCmd, "--out DIR is required");
  if (FLAGS_num_thread < 1 || FLAGS_num_thread > 256) UsageError(kCmd, "--num-thread must be 1..256");
  const bool fashion = args[0] == "fashion-mnist";
  for (const char* f : fashion ? std::vector<const char*>{"classes", "per_class", "quality", "seed"}
                               : std::vector<const char*>{"limit", "fashion_mnist_dir"}) {
    if (!gflags::GetCommandLineFlagInfoOrDie(f).is_default) {
      std::string dashed = f;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      UsageError(kCmd, "--" + dashed + " does not apply to " + args[0]);
    }
  }
  std::error_code ec;
  fs::create_directories(FLAGS_out, ec);
  if (ec) {
    std::fprintf(stderr, "%s: cannot create %s: %s\n", kCmd, FLAGS_out.c_str(), ec.message().c_str());
    return 1;
  }
  return fashion ? FashionMnist(FLAGS_out) : SyntheticJpeg(FLAGS_out);
}

}  // namespace tally
