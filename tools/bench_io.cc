// `tally bench io`: images/s of the training input pipeline (JPEG decode, ImageNet training
// augmentation, batching into NHWC fp32) at each thread count, against PIL + torchvision
// doing the same work on the same JPEG files in the same run (tools/bench/pil_io_peer.py).
// Both figures are divided by the thread count: the goal is throughput per core.
//
// --gpu: the GPU input path instead (data/gpu_loader.h: nvJPEG decode + augmentation on
// cuda:0, NHWC fp16 with 4 channels as training takes it), in img/s, against the CPU loader
// with every core of this machine on the same pack in the same run (ratio = gpu / cpu).
//
// Input: --data DIR (its *.jpg / *.jpeg), --data FILE.rec (its images), or, by default,
// --images generated photo-like JPEGs of 500x375 at quality 90 (ImageNet's typical size).
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gflags/gflags.h>

#include "data/gpu_loader.h"
#include "data/loader.h"
#include "ops/device.h"
#include "ops/random.h"
#include "tools/bench.h"
#include "tools/bench_io.h"
#include "tools/command.h"

DECLARE_bool(json);
DECLARE_bool(gpu);  // defined with bench compute's flags; here: measure the GPU input path
DECLARE_string(python);
DECLARE_bool(decode_overlap);  // tools/bench_io_overlap.cc
DEFINE_int32(images, 512, "bench io: images per timed pass (generated, or the first N of --data)");
DEFINE_string(data, "", "bench io: a folder of JPEGs or a .rec to read instead of generated images");
DEFINE_string(io_threads, "1,2", "bench io: thread counts to measure (also accepted as --threads)");
DEFINE_int32(io_batch, 32, "bench io: batch size");
DEFINE_int32(gpu_batch, 256, "bench io --gpu: batch size of the GPU loader");
DEFINE_int32(gpu_prep_threads, 8, "bench io --gpu: CPU threads reading and planning records for the GPU loader");
DEFINE_int32(gpu_batches, 40, "bench io --gpu: timed batches (the pack is read epoch after epoch)");

namespace tally {

GpuLoaderConfig BenchGpuLoaderConfig(const std::string& dir) {
  GpuLoaderConfig cfg;
  cfg.loader.rec_path = dir + "/images.rec";
  cfg.loader.idx_path = dir + "/images.idx";
  cfg.loader.batch_size = FLAGS_gpu_batch;
  cfg.loader.threads = FLAGS_gpu_prep_threads;
  cfg.loader.prefetch = 4;
  cfg.loader.augment = AugmentParams::ImageNetTrain();
  cfg.dtype = DType::kF16;
  cfg.channels = 4;
  return cfg;
}

namespace {

// A photo-like 500x375 image: smooth shading, a few textured regions and sensor-like noise,
// so that its JPEG has the size and entropy of a photograph (~100 KB at quality 90).
Image PhotoLike(uint64_t seed) {
  Rng rng(seed);
  Image img;
  img.Resize(375, 500);
  float base[3], grad[3], freq[4], phase[4];
  for (int c = 0; c < 3; ++c) base[c] = 60 + 120 * rng.Uniform(), grad[c] = 80 * (rng.Uniform() - 0.5f);
  for (int k = 0; k < 4; ++k) freq[k] = 0.02f + 0.3f * rng.Uniform(), phase[k] = 6.28f * rng.Uniform();
  for (int y = 0; y < img.height; ++y) {
    uint8_t* row = img.row(y);
    for (int x = 0; x < img.width; ++x) {
      float tex = 25 * std::sin(freq[0] * x + phase[0]) * std::sin(freq[1] * y + phase[1]) +
                  15 * std::sin(freq[2] * (x + y) + phase[2]) + 10 * std::sin(freq[3] * x * y * 0.01f + phase[3]);
      for (int c = 0; c < 3; ++c) {
        float v = base[c] + grad[c] * (x + y) / 875.0f + tex * (c + 1) / 3 + 60 * (rng.Uniform() - 0.5f);
        row[3 * x + c] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return img;
}

Status CollectImages(std::vector<std::string>* images) {
  const size_t want = static_cast<size_t>(FLAGS_images);
  if (FLAGS_data.empty()) {
    for (size_t i = 0; i < want; ++i) {
      std::string jpeg;
      TALLY_RETURN_IF_ERROR(EncodeJpeg(PhotoLike(i), 90, &jpeg));
      images->push_back(std::move(jpeg));
    }
    return Status::Ok();
  }
  namespace fs = std::filesystem;
  if (FLAGS_data.size() > 4 && FLAGS_data.substr(FLAGS_data.size() - 4) == ".rec") {
    std::unique_ptr<RecordReader> reader;
    TALLY_RETURN_IF_ERROR(RecordReader::Open(FLAGS_data, "", &reader));
    std::string payload;
    bool eof = false;
    while (images->size() < want) {
      TALLY_RETURN_IF_ERROR(reader->ReadNext(&payload, &eof));
      if (eof) break;
      ImageRecordHeader header;
      std::string_view bytes;
      TALLY_RETURN_IF_ERROR(UnpackImageRecord(payload, &header, &bytes));
      if (DetectImageFormat(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == ImageFormat::kJpeg) {
        images->emplace_back(bytes);
      }
    }
  } else {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(FLAGS_data, ec)) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
      if (ext == ".jpg" || ext == ".jpeg") files.push_back(e.path());
    }
    if (ec) return Status::IoError("bench io: cannot list " + FLAGS_data + ": " + ec.message());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      if (images->size() >= want) break;
      std::ifstream in(f, std::ios::binary);
      images->emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  if (images->size() < static_cast<size_t>(2 * FLAGS_io_batch)) {
    return Status::InvalidArgument("bench io: " + FLAGS_data + " has fewer than " + std::to_string(2 * FLAGS_io_batch) +
                                   " JPEGs");
  }
  return Status::Ok();
}

// Writes the images as DIR/NNNNNN.jpg (for the peer) and DIR/images.rec + .idx (for Tally).
Status WriteInputs(const std::string& dir, const std::vector<std::string>& images) {
  std::unique_ptr<RecordWriter> writer;
  TALLY_RETURN_IF_ERROR(RecordWriter::Open(dir + "/images.rec", &writer));
  for (size_t i = 0; i < images.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/%06zu.jpg", i);
    std::ofstream out(dir + name, std::ios::binary);
    out.write(images[i].data(), static_cast<std::streamsize>(images[i].size()));
    if (!out) return Status::IoError("bench io: cannot write " + dir + name);
    ImageRecordHeader header;
    header.label = static_cast<float>(i % 1000);
    header.id = i;
    TALLY_RETURN_IF_ERROR(writer->Write(PackImageRecord(header, images[i]), i));
  }
  return writer->Close(dir + "/images.idx");
}

// Images/s of Tally's loader with `threads` decode threads over one pass of the pack.
// Images/s of the CPU Loader on DIR/images.rec: `timed` batches of `batch`, epoch after
// epoch, after the prefetch queue has filled once. Timing fewer batches than the queue
// holds would time taking finished batches out of it, not decoding them.
Status MeasureTally(const std::string& dir, int threads, int batch, int64_t timed, double* images_per_s) {
  LoaderConfig cfg;
  cfg.rec_path = dir + "/images.rec";
  cfg.idx_path = dir + "/images.idx";
  cfg.batch_size = batch;
  cfg.threads = threads;
  cfg.prefetch = std::min(2 * threads, 8);
  cfg.round_batch = false;
  cfg.augment = AugmentParams::ImageNetTrain();
  std::unique_ptr<Loader> loader;
  TALLY_RETURN_IF_ERROR(Loader::Create(cfg, &loader));
  timed = std::max<int64_t>(timed, 4 * cfg.prefetch);
  Batch b;
  for (int i = 0; i < cfg.prefetch; ++i) TALLY_RETURN_IF_ERROR(loader->NextBatch(&b));
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < timed; ++i) TALLY_RETURN_IF_ERROR(loader->NextBatch(&b));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *images_per_s = timed * cfg.batch_size / seconds;
  return Status::Ok();
}

// Images/s of the GPU loader: ImageNet training augmentation to [B,224,224,4] fp16 on cuda:0,
// each batch's kernels waited for before the next is asked, as a training step would use it.
Status MeasureGpu(const std::string& dir, double* images_per_s, std::string* decoder, GpuLoaderStats* stats) {
  const GpuLoaderConfig cfg = BenchGpuLoaderConfig(dir);
  std::unique_ptr<GpuLoader> loader;
  TALLY_RETURN_IF_ERROR(GpuLoader::Create(cfg, &loader));
  *decoder = loader->decoder();
  const Device gpu{Device::Kind::kCuda, 0};
  Batch batch;
  for (int i = 0; i < 3; ++i) TALLY_RETURN_IF_ERROR(loader->NextBatch(&batch));
  Synchronize(gpu);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < FLAGS_gpu_batches; ++i) {
    TALLY_RETURN_IF_ERROR(loader->NextBatch(&batch));
    Synchronize(gpu);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *images_per_s = static_cast<double>(FLAGS_gpu_batches) * cfg.loader.batch_size / seconds;
  *stats = loader->stats();
  return Status::Ok();
}

// bench io --gpu: the GPU loader against the CPU loader on all cores, same pack, same run.
Status BenchGpu(const std::string& dir, size_t images, size_t bytes, std::vector<BenchRow>* rows) {
  if (!GpuDecodeBuilt()) return Status::InvalidArgument("bench io --gpu: this Tally was built without nvJPEG");
  TALLY_RETURN_IF_ERROR(CheckDevice(Device{Device::Kind::kCuda, 0}));
  double gpu = 0, cpu = 0;
  std::string decoder;
  GpuLoaderStats stats;
  TALLY_RETURN_IF_ERROR(MeasureGpu(dir, &gpu, &decoder, &stats));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  TALLY_RETURN_IF_ERROR(MeasureTally(dir, cores, FLAGS_gpu_batch, FLAGS_gpu_batches, &cpu));
  BenchRow row;
  row.bench = "io";
  row.name = "gpu-jpeg-imagenet-train-aug-b" + std::to_string(FLAGS_gpu_batch) + "-f16x4";
  row.unit = "img/s";
  row.value = gpu;
  row.peer = cpu;
  row.peer_name = "tally CPU loader, " + std::to_string(cores) + " threads, fp32 out";
  char note[320];
  std::snprintf(note, sizeof note, "%s; nvJPEG %s decoder; %lld GPU-decoded, %lld CPU-decoded; %zu images, mean %.0f KB",
                DeviceDescription(Device{Device::Kind::kCuda, 0}).c_str(), decoder.c_str(),
                static_cast<long long>(stats.gpu_decoded), static_cast<long long>(stats.cpu_decoded), images,
                bytes / 1024.0 / images);
  row.note = note;
  if (!FLAGS_json) std::fprintf(stderr, "  gpu: %.1f img/s, cpu loader (%d threads): %.1f img/s\n", gpu, cores, cpu);
  std::fprintf(stderr, "  gpu loader: %s\n", DescribeGpuLoaderStats(stats).c_str());
  rows->push_back(row);
  return Status::Ok();
}

double MeasurePeer(const std::string& dir, int threads, std::string* name) {
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=1 " << FLAGS_python << " " << TallyHome() << "/tools/bench/pil_io_peer.py --dir "
      << dir << " --threads " << threads << " --batch " << FLAGS_io_batch << " 2>/dev/null";
  bool ok = false;
  std::string out = RunCapture(cmd.str(), &ok);
  size_t v = out.find("\"img_per_s\": ");
  if (!ok || v == std::string::npos) return -1;
  auto field = [&](const char* key) {
    size_t k = out.find(std::string("\"") + key + "\": \"");
    if (k == std::string::npos) return std::string("?");
    k += std::strlen(key) + 5;
    return out.substr(k, out.find('"', k) - k);
  };
  *name = "PIL-" + field("pil") + " torchvision-" + field("torchvision");
  return std::atof(out.c_str() + v + 13);
}

}  // namespace

int BenchIo(int argc, char** argv) {
  // --threads means thread counts here; compute's integer --threads owns the gflags name.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--threads=", 0) == 0) args[i] = "--io_threads=" + args[i].substr(10);
    if (args[i] == "--threads" && i + 1 < args.size()) args[i] = "--io_threads=" + args[i + 1], args.erase(args.begin() + i + 1);
    if (args[i] == "--images" && i + 1 < args.size()) args[i] = "--images=" + args[i + 1], args.erase(args.begin() + i + 1);
    if (args[i] == "--data" && i + 1 < args.size()) args[i] = "--data=" + args[i + 1], args.erase(args.begin() + i + 1);
  }
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  int n = static_cast<int>(ptrs.size());
  char** v = ptrs.data();
  ParseFlags("tally bench io [--json] [--images=512] [--threads=1,2] [--data=DIR|FILE.rec] [--io_batch=32] "
             "[--gpu [--gpu_batch=256] [--gpu_prep_threads=8] [--gpu_batches=40] [--decode-overlap]]",
             &n, &v, {__FILE__, "bench_io_overlap.cc"});

  std::vector<int> thread_counts;
  std::stringstream ss(FLAGS_io_threads);
  for (std::string t; std::getline(ss, t, ',');) {
    int k = std::atoi(t.c_str());
    if (k < 1) {
      std::fprintf(stderr, "tally bench io: --threads wants positive counts such as 1,2\n");
      return 2;
    }
    thread_counts.push_back(k);
  }
  if (FLAGS_decode_overlap && !FLAGS_gpu) {
    std::fprintf(stderr, "tally bench io: --decode-overlap measures the GPU input path: add --gpu\n");
    return 2;
  }
  std::vector<std::string> images;
  Status s = CollectImages(&images);
  char tmpl[] = "/tmp/tally_bench_io_XXXXXX";
  const bool made_dir = s.ok() && mkdtemp(tmpl) != nullptr;
  if (s.ok() && !made_dir) s = Status::IoError("bench io: mkdtemp failed");
  const std::string dir = tmpl;
  if (s.ok()) s = WriteInputs(dir, images);
  size_t bytes = 0;
  for (const std::string& i : images) bytes += i.size();
  std::vector<BenchRow> rows;
  if (FLAGS_gpu && s.ok()) s = FLAGS_decode_overlap ? BenchGpuOverlap(dir, &rows) : BenchGpu(dir, images.size(), bytes, &rows);
  for (int t : thread_counts) {
    if (!s.ok() || FLAGS_gpu) break;
    double tally = 0;
    s = MeasureTally(dir, t, FLAGS_io_batch, static_cast<int64_t>(images.size()) / FLAGS_io_batch, &tally);
    if (!s.ok()) break;
    BenchRow row;
    row.bench = "io";
    row.name = "jpeg-imagenet-train-aug-b" + std::to_string(FLAGS_io_batch) + "-threads" + std::to_string(t);
    row.unit = "img/s/core";
    row.value = tally / t;
    double peer = MeasurePeer(dir, t, &row.peer_name);
    row.peer = peer > 0 ? peer / t : -1;
    char note[160];
    std::snprintf(note, sizeof note, "total img/s: tally %.1f, peer %.1f; %zu images, mean %.0f KB", tally,
                  peer > 0 ? peer : 0.0, images.size(), bytes / 1024.0 / images.size());
    row.note = note;
    if (!FLAGS_json) std::fprintf(stderr, "  threads %d: tally %.1f img/s, peer %.1f img/s\n", t, tally, peer);
    rows.push_back(row);
  }
  if (made_dir) std::filesystem::remove_all(dir);
  if (!s.ok()) {
    std::fprintf(stderr, "tally bench io: %s\n", s.ToString().c_str());
    return 1;
  }
  Report(rows, FLAGS_json);
  return 0;
}

}  // namespace tally
