// NodeProfiler: one process's profiler, the same for every role. It writes the node's
// files under --run-dir (profile/run_dir.h), runs the system monitor, records the
// Chrome trace with --profile, runs the rules on the node's steps and samples (printing
// each finding on one line), and at the end writes the clock offset to the scheduler into
// NODE.meta.json so that `tally report --merge` can put every node on one time line.
//
//   ProfilerOptions options;
//   TALLY_RETURN_IF_ERROR(ProfilerOptionsFromFlags(&options));
//   profile::NodeMeta meta;                                  // who this process is
//   meta.node = "worker-0", meta.role = "worker", meta.rank = 0, meta.host = "localhost";
//   std::unique_ptr<NodeProfiler> prof;
//   TALLY_RETURN_IF_ERROR(NodeProfiler::Start(options, meta, &prof));
//   prof->SetClock([&](int64_t* off, int64_t* rtt) { return cluster->ClockOffset(off, rtt); });
//   prof->BeginStep(step);                                   // per step: before it
//   prof->AddStep(record);                                   //           after it
//   TALLY_RETURN_IF_ERROR(prof->Finish());                   // at the end (the destructor too)
#pragma once

#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "profile/monitor.h"
#include "profile/records.h"
#include "profile/rules.h"
#include "profile/run_dir.h"

namespace tally {

struct ProfilerOptions {
  std::string run_dir;        // empty: no files (the rules and the monitor still run)
  bool trace = false;         // --profile: write NODE.trace.json
  int monitor_interval_ms = 500;
  bool monitor = true;
  profile::RuleConfig rules;
  // Measuring the profiler's cost (tally bench profile): steps alternate, this many with
  // the trace and the step files on, as many off; Finish prints each half's median step.
  int overhead_blocks = 0;
};

// From --run-dir, --profile, --monitor-interval-ms and --profile-rules; fails naming the
// flag that is wrong.
Status ProfilerOptionsFromFlags(ProfilerOptions* options);

class NodeProfiler {
 public:
  static Status Start(const ProfilerOptions& options, const profile::NodeMeta& meta,
                      std::unique_ptr<NodeProfiler>* out);
  ~NodeProfiler();

  // Where the clock offset comes from (Cluster::ClockOffset); none: offset 0 (the
  // scheduler itself, a single process).
  void SetClock(std::function<bool(int64_t*, int64_t*)> clock);

  // Step `step` begins (with overhead_blocks: the profiler turns on or off here).
  void BeginStep(int64_t step);

  // Records a step: the file, the rules (findings printed to stderr and written), and the
  // Speedometer's window. Thread-safe.
  void AddStep(const profile::StepRecord& r);

  // The window since the last call, as " data 3% fwd 30% bwd 55% comm 12%" (fractions of
  // the steps' wall time); empty when no step was added.
  std::string TakeSplit();

  // Stops the monitor, writes the trace and the final meta. Idempotent.
  Status Finish();

  bool tracing() const { return options_.trace; }
  const std::string& run_dir() const { return options_.run_dir; }

 private:
  NodeProfiler() = default;
  void OnSample(const profile::MonitorSample& s);
  void Report(const std::vector<profile::Finding>& findings);

  ProfilerOptions options_;
  profile::NodeMeta meta_;
  std::unique_ptr<profile::RunWriter> writer_;
  std::unique_ptr<profile::OnlineRules> rules_;
  std::unique_ptr<profile::SystemMonitor> monitor_;
  std::function<bool(int64_t*, int64_t*)> clock_;
  std::mutex mu_;
  int64_t split_[profile::kNumPhases] = {};  // GUARDED_BY(mu_): the Speedometer window
  int64_t split_wall_us_ = 0;                // GUARDED_BY(mu_)
  bool finished_ = false;
  bool recording_ = true;                     // GUARDED_BY(mu_): overhead_blocks' current half
  std::vector<double> on_ms_, off_ms_;        // GUARDED_BY(mu_): step times of each half
  std::map<int64_t, std::vector<double>> block_ms_;  // GUARDED_BY(mu_): step times by block
};

}  // namespace tally
