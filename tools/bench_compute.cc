// `tally bench compute`: img/s of a full training step (forward, backward, kvstore update)
// on the CPU, against the same step in PyTorch measured in the same run, in PyTorch's
// faster memory layout. With --gpu: ResNet-50 at batch 256, 224x224, fp16 (--dtype) on
// cuda:0 with synthetic data already on the GPU, against PyTorch with automatic mixed
// precision and channels_last on the same GPU, plus the step's time split.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <gflags/gflags.h>

#include "data/synthetic_data.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "profile/records.h"
#include "tools/bench.h"
#include "tools/command.h"
#include "worker/trainer.h"

DEFINE_bool(json, false, "print one JSON object per line and measurement");
DEFINE_int32(threads, 2, "CPU threads for Tally and for the peer");
DEFINE_int32(steps, 3, "timed steps per case (the median is reported)");
DEFINE_int32(warmup, 1, "untimed steps first");
DEFINE_string(cases, "resnet50,resnet20", "cases: resnet50 (batch 32, 224x224), resnet20 (batch 128, 32x32)");
DEFINE_bool(peer, true, "also time PyTorch (Debian's python3-torch) in the same run");
DEFINE_string(python, "/usr/bin/python3", "the Python that has torch and torchvision");
DEFINE_bool(gpu, false, "the GPU case: resnet50, batch 256, 224x224, on cuda:0 (30 timed steps unless --steps)");
DEFINE_string(bench_dtype, "float16", "with --gpu: float16 (dynamic loss scaling), bfloat16 or float32");
DEFINE_string(peer_modes, "", "PyTorch's ways to run the step (tools/bench/torch_compute_peer.py --modes): "
              "eager, compile, cudagraphs; default eager, with --gpu all three");
DEFINE_string(peer_compile_modes, "default",
              "torch.compile modes for the peer's compile (e.g. default,max-autotune-no-cudagraphs; "
              "max-autotune compiles for many minutes)");

namespace tally {
namespace {

struct ComputeCase {
  const char* key;
  int layers, classes, image, batch;
  bool gpu;
};
const ComputeCase kCases[] = {{"resnet50", 50, 1000, 224, 32, false},
                              {"resnet20", 20, 10, 32, 128, false},
                              {"resnet50-gpu", 50, 1000, 224, 256, true}};

// The median step, and for the GPU case the time split of a few more steps with the GPU
// waited for after each phase (*split, "fwd 31% bwd 62% update 2% other 5%").
double MedianStepSeconds(const ComputeCase& c, DType dtype, int steps, int warmup,
                         std::string* split, Status* status) {
  TrainerConfig cfg;
  cfg.model.num_layers = c.layers;
  cfg.model.num_classes = c.classes;
  cfg.model.image_shape = {3, c.image, c.image};
  cfg.kv_store = c.gpu ? KVStoreType::kDevice : KVStoreType::kLocal;
  cfg.top_k = 0;
  if (c.gpu) {
    cfg.gpus = {0};
    cfg.dtype = dtype;
    cfg.reuse_device_batch = true;  // synthetic data already on the GPU
  }
  std::unique_ptr<Trainer> trainer;
  *status = Trainer::Create(cfg, &trainer);
  if (!status->ok()) return 0;
  SyntheticData data(cfg.model.image_shape, c.classes, 0);
  Tensor images, labels;
  data.NextBatch(c.batch, &images, &labels);
  std::vector<double> times;
  if (trainer->stats_on_device()) {
    // Step only queues work on the GPU (replayed from a CUDA graph from the second step on):
    // time groups of steps, each ended by ReadStats' wait for the GPU.
    const int group = std::max(1, std::min(10, steps / 3));
    for (int i = 0; i < warmup; ++i) {
      StepStats stats;
      *status = trainer->Step(images, labels, &stats);
      if (!status->ok()) return 0;
    }
    StepStats read;
    trainer->ReadStats(&read);
    for (int done = 0; done < steps; done += group) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < group; ++i) {
        StepStats stats;
        *status = trainer->Step(images, labels, &stats);
        if (!status->ok()) return 0;
      }
      trainer->ReadStats(&read);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / group;
      times.push_back(dt);
      if (!FLAGS_json) {
        std::fprintf(stderr, "  %s steps %d-%d: %.4f s each%s\n", c.key, done, done + group - 1, dt,
                     trainer->replaying_graph() ? " (CUDA graph)" : "");
      }
    }
  }
  for (int i = 0; times.empty() && i < warmup + steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    StepStats stats;
    *status = trainer->Step(images, labels, &stats);
    if (!status->ok()) return 0;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) times.push_back(dt);
    if (!FLAGS_json) std::fprintf(stderr, "  %s step %d: %.4f s\n", c.key, i, dt);
  }
  std::sort(times.begin(), times.end());
  if (c.gpu) {
    // Read before the split's second Trainer is made: the peak of the timed steps alone.
    char peak[96];
    std::snprintf(peak, sizeof peak, "peak %.1f GiB in use (Tally's allocator); ",
                  GetDeviceMemoryStats(0).peak_bytes_in_use / 1073741824.0);
    const std::string memory = peak;
    Status made = Trainer::Create([&] { TrainerConfig t = cfg; t.synchronize_phases = true; return t; }(), &trainer);
    int64_t phase[profile::kNumPhases] = {}, total = 0;
    for (int i = 0; made.ok() && i < 3 + 5; ++i) {
      StepStats stats;
      const auto t0 = std::chrono::steady_clock::now();
      made = trainer->Step(images, labels, &stats);
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - t0).count();
      if (i < 3) continue;
      for (int p = 0; p < profile::kNumPhases; ++p) phase[p] += trainer->last_step().phase_us[p];
      total += us;
    }
    if (made.ok() && total > 0) {
      using profile::Phase;
      const int64_t fwd = phase[static_cast<int>(Phase::kForward)];
      const int64_t bwd = phase[static_cast<int>(Phase::kBackward)];
      // The GPU kvstore sums and updates inside WaitAll after recording pushes: counted as
      // update by a step kept on the device, as push and wait otherwise.
      const int64_t update = trainer->stats_on_device()
                                 ? phase[static_cast<int>(Phase::kUpdate)]
                                 : phase[static_cast<int>(Phase::kPush)] + phase[static_cast<int>(Phase::kWait)];
      char buf[160];
      std::snprintf(buf, sizeof buf, "split fwd %.0f%% bwd %.0f%% update %.0f%% other %.0f%%",
                    100.0 * fwd / total, 100.0 * bwd / total, 100.0 * update / total,
                    100.0 * std::max<int64_t>(0, total - fwd - bwd - update) / total);
      *split = buf;
    }
    *split = memory + *split;
  }
  return times[times.size() / 2];
}

// A JSON line's string field (empty when absent).
std::string JsonString(const std::string& line, const std::string& field) {
  const std::string key = "\"" + field + "\": \"";
  const size_t at = line.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  return line.substr(from, line.find('"', from) - from);
}

// Fills the fastest of PyTorch's layouts and modes into row; the others, and the modes that
// were skipped or failed, go into the note.
void MeasurePeer(const ComputeCase& c, DType dtype, int steps, int warmup, BenchRow* row) {
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=" << FLAGS_threads << " " << FLAGS_python << " " << TallyHome()
      << "/tools/bench/torch_compute_peer.py --model resnet" << c.layers << " --batch " << c.batch
      << " --image " << c.image << " --classes " << c.classes << " --threads " << FLAGS_threads
      << " --steps " << steps << " --warmup " << warmup;
  if (c.gpu) {
    // Timed as Tally's steps are: groups of 10, one wait a group.
    cmd << " --device cuda --layouts channels_last --group 10";
    if (dtype != DType::kF32) cmd << " --amp " << DTypeName(dtype);
  }
  const std::string modes = !FLAGS_peer_modes.empty() ? FLAGS_peer_modes : c.gpu ? "eager,compile,cudagraphs" : "eager";
  cmd << " --modes " << modes << " --compile-modes " << FLAGS_peer_compile_modes;
  cmd << " 2>/dev/null";
  bool ok = false;
  std::string out = RunCapture(cmd.str(), &ok);
  std::istringstream lines(out);
  std::string line, others;
  while (std::getline(lines, line)) {
    const std::string layout = JsonString(line, "layout"), mode = JsonString(line, "mode");
    if (layout.empty()) continue;
    const std::string not_run = !JsonString(line, "skipped").empty() ? JsonString(line, "skipped")
                                                                     : JsonString(line, "error");
    if (!not_run.empty()) {
      others += "pytorch " + mode + " not measured (" + not_run + ") ";
      continue;
    }
    const size_t v = line.find("\"img_per_s\": ");
    if (v == std::string::npos) continue;
    const double ips = std::atof(line.c_str() + v + 13);
    char buf[128];
    std::snprintf(buf, sizeof buf, "pytorch-%s %s %s", JsonString(line, "torch").c_str(), layout.c_str(),
                  mode.empty() ? "eager" : mode.c_str());
    if (ips > row->peer) {
      if (row->peer > 0) others += row->peer_name + " " + std::to_string(row->peer).substr(0, 6) + " ";
      row->peer = ips;
      row->peer_name = buf;
    } else {
      others += std::string(buf) + " " + std::to_string(ips).substr(0, 6) + " ";
    }
  }
  if (row->peer <= 0) {
    row->note = "peer not measured: PyTorch unavailable (tools/install_deps.sh --bench)";
  } else if (!others.empty()) {
    row->note = "also " + others;
  }
}

}  // namespace

int BenchCompute(int argc, char** argv) {
  ParseFlags("tally bench compute [--json] [--threads=2] [--steps=3] [--cases=resnet50,resnet20] "
             "[--gpu [--bench-dtype=float16]] [--peer-modes=eager,compile,cudagraphs]", &argc, &argv, {__FILE__});
  SetNumThreads(FLAGS_threads);
  DType dtype = DType::kF32;
  if (FLAGS_gpu) {
    Status s = ParseDType(FLAGS_bench_dtype, &dtype);
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench compute: --bench-dtype: %s\n", s.message().c_str());
      return 2;
    }
    s = CheckDevice(Device{Device::Kind::kCuda, 0});
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench compute --gpu: %s\n", s.message().c_str());
      return 1;
    }
  }
  const bool steps_given = !gflags::GetCommandLineFlagInfoOrDie("steps").is_default;
  const bool warmup_given = !gflags::GetCommandLineFlagInfoOrDie("warmup").is_default;
  std::vector<BenchRow> rows;
  std::stringstream wanted(FLAGS_gpu ? std::string("resnet50-gpu") : FLAGS_cases);
  std::string key;
  while (std::getline(wanted, key, ',')) {
    const ComputeCase* c = nullptr;
    for (const ComputeCase& k : kCases) if (key == k.key) c = &k;
    if (!c) {
      std::fprintf(stderr, "tally bench compute: unknown case '%s' in --cases (resnet50, resnet20; --gpu for the GPU)\n", key.c_str());
      return 2;
    }
    // A GPU step is ~0.1 s: more steps, and a warmup long enough for cuDNN's plans.
    const int steps = c->gpu && !steps_given ? 30 : FLAGS_steps;
    const int warmup = c->gpu && !warmup_given ? 5 : FLAGS_warmup;
    Status s;
    std::string split;
    double step = MedianStepSeconds(*c, dtype, steps, warmup, &split, &s);
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench compute: %s: %s\n", c->key, s.ToString().c_str());
      return 1;
    }
    BenchRow row;
    row.bench = "compute";
    row.name = std::string(c->key) + "-b" + std::to_string(c->batch) + "-" + std::to_string(c->image) + "-" +
               (c->gpu ? (dtype == DType::kF16 ? "fp16" : dtype == DType::kBF16 ? "bf16" : "fp32") : "fp32");
    row.value = c->batch / step;
    row.unit = "img/s";
    if (FLAGS_peer) MeasurePeer(*c, dtype, steps, warmup, &row);
    if (c->gpu) {
      row.note = DeviceDescription(Device{Device::Kind::kCuda, 0}) + "; " + split +
                 (row.note.empty() ? "" : "; " + row.note);
    }
    rows.push_back(row);
  }
  Report(rows, FLAGS_json);
  return 0;
}

}  // namespace tally
