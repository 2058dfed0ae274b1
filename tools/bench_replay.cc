// `tally bench replay`: one process of an emulated training job, what `tally bench scaling`
// starts through tools/launch.py on every node. A scheduler or server runs its role as
// `tally train` does; a worker replays ResNet-50's training step with its compute emulated:
// each module group's forward and backward pass is a timed wait (the step's time at
// --img-per-s, apportioned by the group's FLOPs: models/layer_costs.h), and its 161 real
// arrays go through the real dist_sync kvstore exactly as Trainer::Step sends them — each
// group's gradients pushed (PushPull, priority -key) as its backward wait ends, and, with
// --overlap, the next forward waiting for each group's weights just before its wait
// (KVStore::WaitKey), the step settled (WaitAll) once the forward pass is over; without,
// every pull waited for at the step's end.
//
//   DMLC_ROLE=worker ... tally bench replay --batch-size 256 --img-per-s 70 --wire fp16 --steps 8
//   tally bench replay --no-comm --batch-size 256 --img-per-s 70 --steps 4   # compute alone
//
// A worker prints one line per step and a last line for the harness:
//   REPLAY {"rank": 0, "steps": [[start_ms, fwd_ms, fwd_wait_ms, bwd_ms, end_wait_ms], ...]}
// (times from the first step's start; fwd_ms includes fwd_wait_ms, the waits for weights).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>

#include "compress/compress.h"
#include "kvstore/dist_kvstore.h"
#include "models/layer_costs.h"
#include "net/cluster.h"
#include "tools/bench.h"
#include "tools/command.h"

DECLARE_int32(batch_size);
DECLARE_int32(steps);
DECLARE_bool(overlap);
DEFINE_double(img_per_s, 2800, "emulated compute speed of one worker (images per second)");
DEFINE_string(wire, "fp16",
              "the dtype gradients and weights travel in: fp16 or fp32; 2bit: fp16 values, the pushes "
              "compressed as --gradient-compression 2bit --gc-threshold 0.5 does");
DEFINE_bool(no_comm, false, "bench replay: the emulated compute alone, without a job (the reference)");

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Waits until `deadline` (absolute, so that the oversleep of one wait does not add up).
void SleepUntil(Clock::time_point deadline) {
  std::this_thread::sleep_until(deadline);
}

// One step's times, ms from the first step's start.
struct StepTimes {
  double start = 0, fwd = 0, fwd_wait = 0, bwd = 0, end_wait = 0;
};

class Replay {
 public:
  Replay(std::vector<LayerGroup> groups, double step_s, DType wire, bool two_bit)
      : groups_(std::move(groups)), wire_(wire), two_bit_(two_bit) {
    double total = 0;
    for (const LayerGroup& g : groups_) total += g.flops;
    for (const LayerGroup& g : groups_) {
      const double fwd = step_s / 3 * g.flops / total;  // backward: twice the forward's work
      fwd_.push_back(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(fwd)));
      bwd_.push_back(2 * fwd_.back());
    }
  }

  // Registers every key with the servers (worker 0 sends the values).
  Status Start(KVStore* kv) {
    kv_ = kv;
    OptimizerConfig opt;
    opt.lr = 0.01f;
    TALLY_RETURN_IF_ERROR(kv_->SetOptimizer(opt));
    if (two_bit_) {
      CompressionConfig gc;
      TALLY_RETURN_IF_ERROR(ParseCompression("2bit", 0.5f, &gc));
      TALLY_RETURN_IF_ERROR(kv_->SetGradientCompression(gc));
    }
    std::vector<int> keys;
    std::vector<Tensor> values;
    for (const LayerGroup& g : groups_) {
      for (size_t i = 0; i < g.keys.size(); ++i) {
        keys.push_back(g.keys[i]);
        values.push_back(Tensor::Zeros({g.numel[i]}, wire_));
        grads_[g.keys[i]] = Tensor::Zeros({g.numel[i]}, wire_);
        weights_[g.keys[i]] = Tensor::Zeros({g.numel[i]}, wire_);
      }
    }
    return kv_->Init(keys, values);
  }

  // One step; kv_ null: compute alone.
  Status Step(bool overlap, Clock::time_point t0, StepTimes* out) {
    out->start = MsSince(t0);
    Clock::time_point at = Clock::now();
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (in_flight_) {
        const Clock::time_point w0 = Clock::now();
        for (int key : groups_[g].keys) TALLY_RETURN_IF_ERROR(kv_->WaitKey(key));
        out->fwd_wait += MsSince(w0);
        at = std::max(at, Clock::now());
      }
      at += fwd_[g];
      SleepUntil(at);
    }
    if (in_flight_) {  // every pull is in: the last step is settled, as Trainer::Step does
      TALLY_RETURN_IF_ERROR(kv_->WaitAll());
      in_flight_ = false;
    }
    out->fwd = MsSince(t0) - out->start;
    at = Clock::now();
    for (size_t g = groups_.size(); g-- > 0;) {
      at += bwd_[g];
      SleepUntil(at);
      if (kv_ == nullptr) continue;
      for (int key : groups_[g].keys) TALLY_RETURN_IF_ERROR(kv_->PushPull(key, {grads_[key]}, {weights_[key]}, -key));
    }
    out->bwd = MsSince(t0) - out->start - out->fwd;
    if (kv_ != nullptr && overlap) {
      in_flight_ = true;
    } else if (kv_ != nullptr) {
      const Clock::time_point w0 = Clock::now();
      TALLY_RETURN_IF_ERROR(kv_->WaitAll());
      out->end_wait = MsSince(w0);
    }
    return Status::Ok();
  }

  Status Finish() { return in_flight_ ? kv_->WaitAll() : Status::Ok(); }

 private:
  const std::vector<LayerGroup> groups_;
  const DType wire_;
  const bool two_bit_;
  std::vector<Clock::duration> fwd_, bwd_;
  KVStore* kv_ = nullptr;
  std::map<int, Tensor> grads_, weights_;
  bool in_flight_ = false;
};

Status RunWorker(Replay* replay, int* rank, std::vector<StepTimes>* times) {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<KVStore> kv;
  if (!FLAGS_no_comm) {
    ClusterConfig c;
    TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&c));
    std::unique_ptr<Transport> transport;
    TALLY_RETURN_IF_ERROR(NewJobTransport(c, &transport));
    TALLY_RETURN_IF_ERROR(Cluster::Join(c, std::move(transport), &cluster));
    *rank = cluster->me().rank();
    KVStoreSpec spec;
    spec.type = KVStoreType::kDistSync;
    spec.cluster = cluster.get();
    TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
    TALLY_RETURN_IF_ERROR(replay->Start(kv.get()));
  }
  const Clock::time_point t0 = Clock::now();
  for (int s = 0; s < FLAGS_steps; ++s) {
    StepTimes t;
    TALLY_RETURN_IF_ERROR(replay->Step(FLAGS_overlap, t0, &t));
    std::fprintf(stderr, "replay worker %d: step %d: forward %.1f ms (%.1f waiting for weights), backward %.1f ms, "
                 "end wait %.1f ms\n", *rank, s, t.fwd, t.fwd_wait, t.bwd, t.end_wait);
    times->push_back(t);
  }
  TALLY_RETURN_IF_ERROR(replay->Finish());
  StepTimes end;
  end.start = MsSince(t0);
  times->push_back(end);  // the last step's end
  if (cluster) TALLY_RETURN_IF_ERROR(cluster->Finish(/*timeout_ms=*/60000));
  return Status::Ok();
}

}  // namespace

int BenchReplay(int argc, char** argv) {
  ParseFlags("tally bench replay [--batch-size 256 --img-per-s 2800 --wire fp16 --steps 8 --overlap 1 --no-comm]",
             &argc, &argv, {__FILE__});
  const char* role = std::getenv("DMLC_ROLE");
  if (!FLAGS_no_comm && role != nullptr && std::string(role) != "worker") {
    ClusterConfig c;
    Status s = ClusterConfigFromEnv(&c);
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench replay: %s\n", s.ToString().c_str());
      return 1;
    }
    return RunRole(c);
  }
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "tally bench replay: %s\n", what.c_str());
    return 2;
  };
  if (!FLAGS_no_comm && role == nullptr) return fail("needs the DMLC_* environment of a job (tools/launch.py), or --no-comm");
  if (FLAGS_wire != "fp16" && FLAGS_wire != "fp32" && FLAGS_wire != "2bit") {
    return fail("--wire: fp16, fp32 or 2bit, not '" + FLAGS_wire + "'");
  }
  if (!(FLAGS_img_per_s > 0)) return fail("--img-per-s must be positive");
  if (FLAGS_batch_size < 1) return fail("--batch-size must be positive");
  if (FLAGS_steps < 1) return fail("--steps must be positive");
  std::vector<LayerGroup> groups;
  Status s = LayerGroups(ModelConfig(), &groups);
  if (!s.ok()) return fail(s.ToString());
  Replay replay(std::move(groups), FLAGS_batch_size / FLAGS_img_per_s,
                FLAGS_wire == "fp32" ? DType::kF32 : DType::kF16, FLAGS_wire == "2bit");
  int rank = 0;
  std::vector<StepTimes> times;
  s = RunWorker(&replay, &rank, &times);
  if (!s.ok()) return fail(s.ToString());
  std::string line = "REPLAY {\"rank\": " + std::to_string(rank) + ", \"steps\": [";
  char buf[160];
  for (size_t i = 0; i < times.size(); ++i) {
    const StepTimes& t = times[i];
    std::snprintf(buf, sizeof buf, "%s[%.3f, %.3f, %.3f, %.3f, %.3f]", i ? ", " : "", t.start, t.fwd, t.fwd_wait,
                  t.bwd, t.end_wait);
    line += buf;
  }
  std::printf("%s]}\n", line.c_str());
  return 0;
}

}  // namespace tally
