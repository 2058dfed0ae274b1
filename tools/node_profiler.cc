#include "tools/node_profiler.h"

#include <cstdio>

#include <gflags/gflags.h>

#include "ops/profile/trace.h"

DEFINE_string(run_dir, "", "write the profiler's files (step times, system samples, findings) of every node here; "
              "`tally report DIR` makes the page");
DEFINE_bool(profile, false, "also write a Chrome/Perfetto trace per process into --run-dir (default tally-run) "
            "and add the step's time split to the Speedometer lines");
DEFINE_int32(monitor_interval_ms, 500, "system monitor sampling interval (0: no monitor)");
DEFINE_string(profile_rules, "", "rule thresholds, such as data_wait_share=0.3,window=50 (docs/rules.md)");

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

void NodeProfiler::AddStep(const profile::StepRecord& r) {
  if (writer_) writer_->AddStep(r);
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
