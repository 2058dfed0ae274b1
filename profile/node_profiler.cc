#include "profile/node_profiler.h"

#include <algorithm>
#include <cstdio>

#include <gflags/gflags.h>

#include "profile/trace.h"

DEFINE_string(run_dir, "", "write the profiler's files (step times, system samples, findings) of every node here; "
              "`tally report DIR` makes the page");
DEFINE_bool(profile, false, "also write a Chrome/Perfetto trace per process into --run-dir (default tally-run) "
            "and add the step's time split to the Speedometer lines");
DEFINE_int32(monitor_interval_ms, 500, "system monitor sampling interval (0: no monitor)");
DEFINE_string(profile_rules, "", "rule thresholds, such as data_wait_share=0.3,window=50 (docs/rules.md)");
DEFINE_int32(profile_overhead_blocks, 0, "measuring the profiler's cost: alternate this many steps with the trace "
             "and step files on and as many off, and print each half's median step time at the end");

namespace tally {

Status ProfilerOptionsFromFlags(ProfilerOptions* o) {
  o->run_dir = FLAGS_run_dir;
  o->trace = FLAGS_profile;
  if (o->trace && o->run_dir.empty()) o->run_dir = "tally-run";
  if (FLAGS_monitor_interval_ms != 0 && (FLAGS_monitor_interval_ms < 50 || FLAGS_monitor_interval_ms > 60000)) {
    return Status::InvalidArgument("--monitor-interval-ms " + std::to_string(FLAGS_monitor_interval_ms) +
                                   ": give 50..60000, or 0 for no monitor");
  }
  o->monitor = FLAGS_monitor_interval_ms != 0;
  o->monitor_interval_ms = FLAGS_monitor_interval_ms;
  if (FLAGS_profile_overhead_blocks < 0) return Status::InvalidArgument("--profile-overhead-blocks must be >= 0");
  o->overhead_blocks = FLAGS_profile_overhead_blocks;
  Status s = profile::ParseRuleConfig(FLAGS_profile_rules, &o->rules);
  if (!s.ok()) return Status::InvalidArgument("--profile-rules: " + s.message());
  return Status::Ok();
}

Status NodeProfiler::Start(const ProfilerOptions& options, const profile::NodeMeta& meta,
                           std::unique_ptr<NodeProfiler>* out) {
  std::unique_ptr<NodeProfiler> p(new NodeProfiler());
  p->options_ = options;
  p->meta_ = meta;
  p->meta_.start_us = profile::NowUs();
  if (!options.run_dir.empty()) {
    TALLY_RETURN_IF_ERROR(profile::RunWriter::Open(options.run_dir, p->meta_, &p->writer_));
  }
  if (options.trace) {
    profile::Tracer& tracer = profile::Tracer::Get();
    tracer.Enable(p->writer_->Path(".trace.json"), meta.node + " (" + meta.host + ", pid " + std::to_string(meta.pid) + ")");
    tracer.NameThread(meta.role == "worker" ? "trainer" : "main");
  }
  p->rules_ = std::make_unique<profile::OnlineRules>(p->meta_, options.rules);
  if (options.monitor) {
    profile::MonitorOptions mo;
    mo.interval_ms = options.monitor_interval_ms;
    NodeProfiler* self = p.get();
    TALLY_RETURN_IF_ERROR(profile::SystemMonitor::Start(
        mo, [self](const profile::MonitorSample& s) { self->OnSample(s); }, &p->monitor_));
  }
  *out = std::move(p);
  return Status::Ok();
}

NodeProfiler::~NodeProfiler() {
  Status s = Finish();
  if (!s.ok()) std::fprintf(stderr, "tally: profiler: %s\n", s.ToString().c_str());
}

void NodeProfiler::SetClock(std::function<bool(int64_t*, int64_t*)> clock) {
  std::lock_guard<std::mutex> lock(mu_);
  clock_ = std::move(clock);
}

void NodeProfiler::Report(const std::vector<profile::Finding>& findings) {
  for (const profile::Finding& f : findings) {
    std::fprintf(stderr, "%s\n", f.Line().c_str());
    if (writer_) writer_->AddFinding(f);
  }
}

void NodeProfiler::OnSample(const profile::MonitorSample& s) {
  if (writer_) writer_->AddSample(s);
  profile::Tracer& tracer = profile::Tracer::Get();
  if (tracer.enabled()) {
    tracer.Counter("cpu %", s.t_us, {{"busy", s.cpu_total}, {"iowait", s.iowait}, {"process", s.process_cpu}});
    tracer.Counter("memory GiB", s.t_us, {{"used", s.mem_used / 1073741824.0}});
    tracer.Counter("network MB/s", s.t_us, {{"rx", s.net_rx_bps / 1e6}, {"tx", s.net_tx_bps / 1e6}});
    for (size_t g = 0; g < s.gpus.size(); ++g) {
      tracer.Counter("gpu %", s.t_us, {{"gpu" + std::to_string(g), s.gpus[g].util}});
    }
  }
  rules_->AddSample(s);
  Report(rules_->TakeNew());
}

void NodeProfiler::BeginStep(int64_t step) {
  const int n = options_.overhead_blocks;
  if (n <= 0) return;
  // Blocks pair up as (0,1), (2,3), ...; the pairs run on-off, off-on, on-off, ..., so a
  // drift of the machine's speed during the run favours neither half.
  const int64_t block = step / n, pair = block / 2;
  const bool on = block % 2 == pair % 2;
  std::lock_guard<std::mutex> lock(mu_);
  if (on == recording_) return;
  recording_ = on;
  profile::Tracer::Get().SetPaused(!on);
}

void NodeProfiler::AddStep(const profile::StepRecord& r) {
  bool recording;
  {
    std::lock_guard<std::mutex> lock(mu_);
    recording = recording_;
    // The first pair of blocks (start-up) and the first step of each block (it pays for
    // the switch) are left out.
    const int n = options_.overhead_blocks;
    if (n > 0 && r.step >= 2 * n && r.step % n != 0) {
      (recording ? on_ms_ : off_ms_).push_back(r.dur_us / 1000.0);
      block_ms_[r.step / n].push_back(r.dur_us / 1000.0);
    }
  }
  if (writer_ && recording) writer_->AddStep(r);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int p = 0; p < profile::kNumPhases; ++p) split_[p] += r.phase_us[p];
    split_wall_us_ += r.dur_us;
  }
  profile::Tracer::Get().Complete("step", "step", r.start_us, r.dur_us, "step", static_cast<double>(r.step));
  rules_->AddStep(r);
  Report(rules_->TakeNew());
}

std::string NodeProfiler::TakeSplit() {
  using profile::Phase;
  std::lock_guard<std::mutex> lock(mu_);
  if (split_wall_us_ <= 0) return "";
  auto pct = [&](int64_t us) { return static_cast<int>(100.0 * us / split_wall_us_ + 0.5); };
  auto at = [&](Phase p) { return split_[static_cast<int>(p)]; };
  const int64_t comm = at(Phase::kPush) + at(Phase::kPull) + at(Phase::kWait) + at(Phase::kUpdate);
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "data %d%%", pct(at(Phase::kData)));
  if (at(Phase::kH2D) > 0) n += std::snprintf(buf + n, sizeof buf - n, " h2d %d%%", pct(at(Phase::kH2D)));
  std::snprintf(buf + n, sizeof buf - n, " fwd %d%% bwd %d%% comm %d%%", pct(at(Phase::kForward)),
                pct(at(Phase::kBackward)), pct(comm));
  for (int64_t& v : split_) v = 0;
  split_wall_us_ = 0;
  return buf;
}

Status NodeProfiler::Finish() {
  std::function<bool(int64_t*, int64_t*)> clock;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return Status::Ok();
    finished_ = true;
    clock = clock_;
  }
  monitor_.reset();
  if (options_.overhead_blocks > 0 && meta_.role == "worker") {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::lock_guard<std::mutex> lock(mu_);
    // Each complete pair of blocks: the median step of its on block over its off block's.
    std::vector<double> ratios;
    for (const auto& [block, ms] : block_ms_) {
      if (block % 2 != 0) continue;
      auto next = block_ms_.find(block + 1);
      if (next == block_ms_.end() || next->second.size() != ms.size()) continue;
      const bool first_on = (block / 2) % 2 == 0;
      const double a = median(ms), b = median(next->second);
      ratios.push_back(first_on ? a / b : b / a);
    }
    std::printf("tally: profiler overhead: %s: on %zu steps median %.4f ms, off %zu steps median %.4f ms, "
                "%zu block pairs median ratio %.4f\n",
                meta_.node.c_str(), on_ms_.size(), median(on_ms_), off_ms_.size(), median(off_ms_), ratios.size(),
                median(ratios));
    std::fflush(stdout);
  }
  if (clock) {
    int64_t offset = 0, rtt = -1;
    if (clock(&offset, &rtt)) {
      meta_.clock_offset_us = offset;
      meta_.clock_rtt_us = rtt;
    }
  } else {
    meta_.clock_rtt_us = 0;  // the reference clock itself: the scheduler, or a single process
  }
  Status s;
  if (writer_) s = writer_->UpdateMeta(meta_);
  if (options_.trace) {
    Status t = profile::Tracer::Get().Finish({{"node", meta_.node},
                                               {"clock_offset_us", std::to_string(meta_.clock_offset_us)},
                                               {"clock_rtt_us", std::to_string(meta_.clock_rtt_us)}});
    if (s.ok()) s = t;
  }
  return s;
}

}  // namespace tally
