// `tally bench compute`: img/s of a full training step (forward, backward, kvstore update)
// on the CPU, against the same step in PyTorch measured in the same run, in PyTorch's
// faster memory layout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <gflags/gflags.h>

#include "ops/ops.h"
#include "tools/bench.h"
#include "tools/command.h"
#include "worker/synthetic_data.h"
#include "worker/trainer.h"

DEFINE_bool(json, false, "print one JSON object per line and measurement");
DEFINE_int32(threads, 2, "CPU threads for Tally and for the peer");
DEFINE_int32(steps, 3, "timed steps per case (the median is reported)");
DEFINE_int32(warmup, 1, "untimed steps first");
DEFINE_string(cases, "resnet50,resnet20", "cases: resnet50 (batch 32, 224x224), resnet20 (batch 128, 32x32)");
DEFINE_bool(peer, true, "also time PyTorch (Debian's python3-torch) in the same run");
DEFINE_string(python, "/usr/bin/python3", "the Python that has torch and torchvision");

namespace tally {
namespace {

struct ComputeCase {
  const char* key;
  int layers, classes, image, batch;
};
const ComputeCase kCases[] = {{"resnet50", 50, 1000, 224, 32}, {"resnet20", 20, 10, 32, 128}};

double MedianStepSeconds(const ComputeCase& c, Status* status) {
  TrainerConfig cfg;
  cfg.model.num_layers = c.layers;
  cfg.model.num_classes = c.classes;
  cfg.model.image_shape = {3, c.image, c.image};
  cfg.kv_store = "local";
  cfg.top_k = 0;
  std::unique_ptr<Trainer> trainer;
  *status = Trainer::Create(cfg, &trainer);
  if (!status->ok()) return 0;
  SyntheticData data(cfg.model.image_shape, c.classes, 0);
  Tensor images, labels;
  data.NextBatch(c.batch, &images, &labels);
  std::vector<double> times;
  for (int i = 0; i < FLAGS_warmup + FLAGS_steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    StepStats stats;
    *status = trainer->Step(images, labels, &stats);
    if (!status->ok()) return 0;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= FLAGS_warmup) times.push_back(dt);
    if (!FLAGS_json) std::fprintf(stderr, "  %s step %d: %.3f s\n", c.key, i, dt);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Fills the best of PyTorch's layouts into row; the other layout goes into the note.
void MeasurePeer(const ComputeCase& c, BenchRow* row) {
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=" << FLAGS_threads << " " << FLAGS_python << " " << TALLY_SOURCE_DIR
      << "/tools/bench/torch_compute_peer.py --model resnet" << c.layers << " --batch " << c.batch
      << " --image " << c.image << " --classes " << c.classes << " --threads " << FLAGS_threads
      << " --steps " << FLAGS_steps << " --warmup " << FLAGS_warmup << " 2>/dev/null";
  bool ok = false;
  std::string out = RunCapture(cmd.str(), &ok);
  std::istringstream lines(out);
  std::string line, others;
  while (std::getline(lines, line)) {
    size_t l = line.find("\"layout\": \""), v = line.find("\"img_per_s\": "), t = line.find("\"torch\": \"");
    if (l == std::string::npos || v == std::string::npos) continue;
    std::string layout = line.substr(l + 11, line.find('"', l + 11) - l - 11);
    double ips = std::atof(line.c_str() + v + 13);
    std::string version = t == std::string::npos ? "" : line.substr(t + 10, line.find('"', t + 10) - t - 10);
    char buf[96];
    std::snprintf(buf, sizeof buf, "pytorch-%s %s", version.c_str(), layout.c_str());
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
  ParseFlags("tally bench compute [--json] [--threads=2] [--steps=3] [--cases=resnet50,resnet20]", &argc, &argv);
  SetNumThreads(FLAGS_threads);
  std::vector<BenchRow> rows;
  std::stringstream wanted(FLAGS_cases);
  std::string key;
  while (std::getline(wanted, key, ',')) {
    const ComputeCase* c = nullptr;
    for (const ComputeCase& k : kCases) if (key == k.key) c = &k;
    if (!c) {
      std::fprintf(stderr, "tally bench compute: unknown case '%s' in --cases (resnet50, resnet20)\n", key.c_str());
      return 2;
    }
    Status s;
    double step = MedianStepSeconds(*c, &s);
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench compute: %s: %s\n", c->key, s.ToString().c_str());
      return 1;
    }
    BenchRow row;
    row.bench = "compute";
    row.name = std::string(c->key) + "-b" + std::to_string(c->batch) + "-" + std::to_string(c->image) + "-fp32";
    row.value = c->batch / step;
    row.unit = "img/s";
    if (FLAGS_peer) MeasurePeer(*c, &row);
    rows.push_back(row);
  }
  Report(rows, FLAGS_json);
  return 0;
}

}  // namespace tally
