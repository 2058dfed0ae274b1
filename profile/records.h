// What the profiler records, and the lines of a run directory's files (docs/profile.md).
//
// Every role writes, under the run directory (--run-dir), files named after its node
// ("worker-0", "server-1", "scheduler"):
//   NODE.meta.json       who the process is, its clock offset to the scheduler, its config
//   NODE.steps.jsonl     one StepRecord per line
//   NODE.monitor.jsonl   one MonitorSample per line (profile/monitor.h)
//   NODE.findings.jsonl  one Finding per line: the rules that fired while training
//   NODE.trace.json      with --profile: a Chrome trace of the process (profile/trace.h)
// Times are microseconds on the process's trace clock (NowUs); adding the node's
// clock_offset_us gives the scheduler's clock, the one time line of the merged trace.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally {
namespace profile {

// The trace clock: CLOCK_MONOTONIC in microseconds (plus FaultHooks::clock_skew_us, which
// tests set to give one process a clock that disagrees with the others').
int64_t NowUs();

// The parts of a step. A worker's: data wait, host-to-device copy, forward, backward
// (without the pushes made inside it), push (issuing the gradients), pull (copying pulled
// weights in), wait (blocked until the step's communication and the other workers are
// done). A server's: sum (adding the workers' pushes) and update (the optimizer).
enum class Phase : int { kData, kH2D, kForward, kBackward, kPush, kPull, kWait, kSum, kUpdate };
constexpr int kNumPhases = 9;
// "data", "h2d", "fwd", "bwd", "push", "pull", "wait", "sum", "update"
const char* PhaseName(Phase p);

struct StepRecord {
  int64_t step = 0;   // the job's step count (a server: the step of the pushes)
  int64_t epoch = -1;  // workers only, as are batch, samples, loss, accuracy and grad_norm
  int64_t batch = -1;
  int64_t start_us = 0;  // trace clock
  int64_t dur_us = 0;    // wall time of the step (a server: first to last request of it)
  int64_t phase_us[kNumPhases] = {};
  int64_t samples = 0;
  // loss and accuracy are measured when has_metrics: a GPU step that keeps its figures on
  // the device (Trainer::stats_on_device) has none of its own; the Speedometer's lines give
  // the window's.
  bool has_metrics = true;
  double loss = 0;       // mean over the step's samples; NaN/Inf are kept as such
  double accuracy = 0;   // top-1, 0..1
  double grad_norm = -1;  // L2 norm of the step's gradients (-1: not measured)
  int64_t requests = 0;   // a server: requests answered for this step
  int64_t bytes_in = 0;   // a server: payload bytes received and sent for this step
  int64_t bytes_out = 0;

  int64_t phase(Phase p) const { return phase_us[static_cast<int>(p)]; }
  int64_t& phase(Phase p) { return phase_us[static_cast<int>(p)]; }
};

// One sample of the system monitor.
struct GpuSample {
  double util = 0;        // percent, 0..100
  int64_t mem_used = 0;   // bytes
  int64_t mem_total = 0;
};
struct MonitorSample {
  int64_t t_us = 0;               // trace clock
  std::vector<double> cpu;        // busy percent of each core since the last sample
  double cpu_total = 0;           // busy percent of all cores
  double iowait = 0;              // percent of all cores' time spent in iowait
  double process_cpu = 0;         // this process, percent of one core (200 = two cores busy)
  int64_t mem_used = 0;           // bytes: MemTotal - MemAvailable
  int64_t mem_total = 0;
  double net_rx_bps = 0;          // bytes per second over every interface but lo
  double net_tx_bps = 0;
  double disk_read_bps = 0;       // bytes per second over every disk
  double disk_write_bps = 0;
  std::vector<GpuSample> gpus;    // empty without NVML or GPUs
};

// A rule that fired: what is wrong, and what to change.
struct Finding {
  std::string rule;      // "data_starvation", "io_bottleneck", ... (docs/profile.md)
  std::string node;      // "worker-1"; "job" for rules over several nodes
  int64_t step = -1;     // the step it fired at (-1: over the whole run)
  std::string message;   // one line: what is wrong
  std::string advice;    // one line: what to change
  std::string evidence;  // the figures it is based on
  // "tally: worker-1 step 120: data_starvation: ... -> raise --data-nthreads ..."
  std::string Line() const;
};

// Who a process is, written to NODE.meta.json.
struct NodeMeta {
  std::string node;  // "worker-0", "server-1", "scheduler"
  std::string role;  // "worker", "server", "scheduler"
  int rank = 0;
  std::string host;
  int pid = 0;
  int64_t start_us = 0;         // trace clock, when the process began recording
  int64_t clock_offset_us = 0;  // scheduler clock = trace clock + this
  int64_t clock_rtt_us = -1;    // round trip of the sample the offset came from (-1: none)
  std::map<std::string, std::string> config;  // the run's settings: batch_size, kv_store, ...
};

// One JSON object on one line, and back. Parse fails naming what is missing or malformed.
std::string ToJson(const StepRecord& r);
std::string ToJson(const MonitorSample& s);
std::string ToJson(const Finding& f);
std::string ToJson(const NodeMeta& m);
Status FromJson(const std::string& text, StepRecord* r);
Status FromJson(const std::string& text, MonitorSample* s);
Status FromJson(const std::string& text, Finding* f);
Status FromJson(const std::string& text, NodeMeta* m);

}  // namespace profile
}  // namespace tally
