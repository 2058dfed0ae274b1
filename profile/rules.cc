#include "profile/rules.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace tally {
namespace profile {
namespace {

// In the order of OnlineRules::Rule.
const char* const kRuleNames[] = {"data_starvation",     "io_bottleneck", "low_gpu_util",       "step_outliers",
                                  "loss_not_decreasing", "nan_inf",       "exploding_gradients"};

// step_outliers and exploding_gradients look back over this many windows.
constexpr size_t kRecentWindows = 5;
// A node that records no steps (the scheduler) keeps at most this many samples.
constexpr size_t kMaxSamples = 4096;
// low_gpu_util judges a window only on this many samples taken within it. A busy GPU makes
// short windows that may hold fewer (20 steps of 23 ms within 500 ms samples); an idle one
// makes long steps, so its windows hold enough.
constexpr size_t kMinGpuSamples = 2;

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string Ms(double us) {
  if (us >= 1e7) return Format("%.1f s", us / 1e6);
  return Format(us < 10000 ? "%.1f ms" : "%.0f ms", us / 1000);
}

// "1 GPU", "2 GPUs".
std::string Count(size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// The GPUs a worker uses, from its "gpus" setting ("0,2"; "" for a CPU worker): none
// judged for a CPU worker, every one when the setting is absent or names none.
void GpusOf(const NodeMeta& meta, bool* judge, std::vector<int>* indices) {
  *judge = meta.role == "worker";
  auto it = meta.config.find("gpus");
  if (!*judge || it == meta.config.end()) return;
  const std::string& text = it->second;
  if (text.find_first_not_of(" \t") == std::string::npos) {
    *judge = false;
    return;
  }
  for (size_t start = 0; start < text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    char* end = nullptr;
    const std::string item = text.substr(start, comma - start);
    const long v = std::strtol(item.c_str(), &end, 10);
    if (end != item.c_str() && v >= 0) indices->push_back(static_cast<int>(v));
    start = comma + 1;
  }
}

template <typename Container>
double Median(const Container& values) {
  std::vector<double> v(values.begin(), values.end());
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  return (v[mid] + *std::max_element(v.begin(), v.begin() + mid)) / 2;
}

// " (now 4)" from the node's config, or nothing.
std::string Now(const NodeMeta& meta, const char* key) {
  auto it = meta.config.find(key);
  return it == meta.config.end() ? "" : " (now " + it->second + ")";
}

// --profile-rules settings: the field each sets, and its range (lo excluded when lo_open).
constexpr double kNoLimit = INFINITY;
struct Setting {
  const char* name;
  int RuleConfig::*int_field;
  double RuleConfig::*double_field;
  double lo, hi;
  bool lo_open;
};
const Setting kSettings[] = {
    {"warmup_steps", &RuleConfig::warmup_steps, nullptr, 0, 1e9, false},
    {"window", &RuleConfig::window, nullptr, 2, 1e6, false},
    {"data_wait_share", nullptr, &RuleConfig::data_wait_share, 0, 1, false},
    {"iowait_percent", nullptr, &RuleConfig::iowait_percent, 0, 100, false},
    {"gpu_util_percent", nullptr, &RuleConfig::gpu_util_percent, 0, 100, false},
    {"outlier_factor", nullptr, &RuleConfig::outlier_factor, 1, kNoLimit, true},
    {"outlier_share", nullptr, &RuleConfig::outlier_share, 0, 1, false},
    {"straggler_factor", nullptr, &RuleConfig::straggler_factor, 1, kNoLimit, true},
    {"imbalance_factor", nullptr, &RuleConfig::imbalance_factor, 1, kNoLimit, true},
    {"loss_min_drop", nullptr, &RuleConfig::loss_min_drop, 0, 1, false},
    {"loss_windows", &RuleConfig::loss_windows, nullptr, 2, 1e6, false},
    {"grad_explode_factor", nullptr, &RuleConfig::grad_explode_factor, 1, kNoLimit, true},
};

std::string ValidNames() {
  std::string out;
  for (const Setting& s : kSettings) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return "valid: " + out;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

Status SetOne(const std::string& item, RuleConfig* config) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos) {
    return Status::InvalidArgument("\"" + item + "\": give name=value (" + ValidNames() + ")");
  }
  const std::string name = Trim(item.substr(0, eq)), text = Trim(item.substr(eq + 1));
  const Setting* s = nullptr;
  for (const Setting& candidate : kSettings) {
    if (name == candidate.name) s = &candidate;
  }
  if (s == nullptr) return Status::InvalidArgument("unknown rule setting \"" + name + "\" (" + ValidNames() + ")");
  errno = 0;
  char* end = nullptr;
  const double v = s->int_field != nullptr ? static_cast<double>(std::strtoll(text.c_str(), &end, 10))
                                           : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v)) {
    return Status::InvalidArgument(name + "=" + text + ": not " +
                                   (s->int_field != nullptr ? "an integer" : "a number"));
  }
  if (v > s->hi || v < s->lo || (s->lo_open && v == s->lo)) {
    std::string range = Format(s->lo_open ? "more than %.15g" : "%.15g", s->lo);
    if (std::isinf(s->hi)) {
      range += s->lo_open ? "" : " or more";
    } else {
      range += Format(s->lo_open ? ", up to %.15g" : "..%.15g", s->hi);
    }
    return Status::InvalidArgument(name + "=" + text + ": give " + range);
  }
  if (s->int_field != nullptr) {
    config->*(s->int_field) = static_cast<int>(v);
  } else {
    config->*(s->double_field) = v;
  }
  return Status::Ok();
}

}  // namespace

Status ParseRuleConfig(const std::string& spec, RuleConfig* config) {
  RuleConfig parsed = *config;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = Trim(spec.substr(start, comma - start));
    if (!item.empty()) TALLY_RETURN_IF_ERROR(SetOne(item, &parsed));
    start = comma + 1;
  }
  *config = parsed;
  return Status::Ok();
}

OnlineRules::OnlineRules(const NodeMeta& meta, const RuleConfig& config)
    : meta_(meta), config_(config), worker_(meta.role == "worker") {
  GpusOf(meta_, &judge_gpus_, &gpu_indices_);
}

void OnlineRules::AddStep(const StepRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  // A worker's steps go forward within a run; one numbered at or below the last is a
  // resumed run's (appended to the same file), which is judged afresh. (A server's steps
  // may come out of order with dist_async, so servers are not judged this way.)
  if (worker_ && have_step_ && r.step <= last_step_) StartSegment();
  have_step_ = true;
  last_step_ = r.step;
  last_start_us_ = r.start_us;
  CheckNanInf(r);
  if (++segment_steps_ > config_.warmup_steps) {
    CheckGradient(r);
    window_.push_back(r);
    if (static_cast<int>(window_.size()) >= config_.window) {
      JudgeWindow();
      window_.clear();
    }
  }
  TrimSamples();
}

void OnlineRules::AddSample(const MonitorSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.push_back(s);
  TrimSamples();
}

std::vector<Finding> OnlineRules::TakeNew() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Finding> out;
  out.swap(new_);
  return out;
}

void OnlineRules::StartSegment() {
  segment_steps_ = 0;
  window_.clear();
  recent_times_.clear();
  recent_norms_.clear();
  loss_windows_ = 0;
}

// Keeps the samples of the window being filled, and the last one before it (which stands
// in for a window too short to hold a sample of its own).
void OnlineRules::TrimSamples() {
  if (have_step_) {
    const int64_t from = window_.empty() ? last_start_us_ : window_.front().start_us;
    while (samples_.size() >= 2 && samples_[1].t_us <= from) samples_.pop_front();
  }
  while (samples_.size() > kMaxSamples) samples_.pop_front();
}

bool OnlineRules::HoldsInWindow(Rule rule, bool holds) {
  Arm& a = arm_[rule];
  if (!holds) {
    a.armed = true;
    return false;
  }
  const bool fire = a.armed;
  a.armed = false;
  return fire;
}

bool OnlineRules::HoldsAtStep(Rule rule, bool holds) {
  Arm& a = arm_[rule];
  if (!holds) {
    if (!a.armed && ++a.clear_steps >= config_.window) a.armed = true;
    return false;
  }
  a.clear_steps = 0;
  const bool fire = a.armed;
  a.armed = false;
  return fire;
}

void OnlineRules::Fire(Rule rule, int64_t step, std::string message, std::string advice, std::string evidence) {
  static_assert(sizeof(kRuleNames) / sizeof(kRuleNames[0]) == kNumRules, "a name for every rule");
  Finding f;
  f.rule = kRuleNames[rule];
  f.node = meta_.node;
  f.step = step;
  f.message = std::move(message);
  f.advice = std::move(advice);
  f.evidence = std::move(evidence);
  new_.push_back(std::move(f));
}

void OnlineRules::CheckNanInf(const StepRecord& r) {
  const bool bad_loss = r.samples > 0 && r.has_metrics && !std::isfinite(r.loss);
  const bool bad_norm = r.grad_norm != -1 && !std::isfinite(r.grad_norm);
  if (bad_loss || bad_norm) ++nan_steps_;
  if (!HoldsAtStep(kNanInf, bad_loss || bad_norm)) return;
  std::string what = bad_loss ? Format("the loss is %g", r.loss) : "";
  if (bad_norm) what += (bad_loss ? " and the" : "the") + Format(" gradient norm is %g", r.grad_norm);
  Fire(kNanInf, r.step, what,
       "lower --lr (or warm it up with --warmup-epochs), keep loss scaling on with --dtype float16, "
       "and check the input for corrupt records",
       Format("loss=%g grad_norm=%g non_finite_steps=%lld", r.loss, r.grad_norm, static_cast<long long>(nan_steps_)));
}

void OnlineRules::CheckGradient(const StepRecord& r) {
  if (r.grad_norm < 0 || !std::isfinite(r.grad_norm)) return;  // not measured, or nan_inf's
  const bool judged = static_cast<int>(recent_norms_.size()) >= config_.window;
  const double median = judged ? Median(recent_norms_) : 0;
  const bool holds = median > 0 && r.grad_norm > config_.grad_explode_factor * median;
  const bool fire = judged && HoldsAtStep(kExplodingGradients, holds);
  const size_t earlier = recent_norms_.size();
  recent_norms_.push_back(r.grad_norm);
  if (recent_norms_.size() > kRecentWindows * config_.window) recent_norms_.pop_front();
  if (!fire) return;
  Fire(kExplodingGradients, r.step,
       Format("the gradient norm jumped to %.4g, %.1fx the median of the %zu steps before (%.4g)", r.grad_norm,
              r.grad_norm / median, earlier, median),
       "lower --lr (or warm it up with --warmup-epochs) and check this step's batch for outliers",
       Format("grad_norm=%g median=%g earlier_steps=%zu factor=%g", r.grad_norm, median, earlier,
              config_.grad_explode_factor));
}

void OnlineRules::JudgeWindow() {
  const StepRecord& last = window_.back();
  int64_t data_us = 0, dur_us = 0;
  for (const StepRecord& r : window_) {
    data_us += r.phase(Phase::kData);
    dur_us += r.dur_us;
  }
  const double n = static_cast<double>(window_.size());
  const double share = dur_us > 0 ? static_cast<double>(data_us) / dur_us : 0;
  if (worker_ && dur_us > 0 && HoldsInWindow(kDataStarvation, share > config_.data_wait_share)) {
    Fire(kDataStarvation, last.step,
         Format("data loading takes %.0f%% of the step (data wait %s of %s)", 100 * share, Ms(data_us / n).c_str(),
                Ms(dur_us / n).c_str()),
         "raise --data-nthreads" + Now(meta_, "data_nthreads") +
             " or lighten augmentation; the decode threads cannot keep up",
         Format("data_us=%lld dur_us=%lld share=%.3f steps=%zu threshold=%g", static_cast<long long>(data_us),
                static_cast<long long>(dur_us), share, window_.size(), config_.data_wait_share));
  }
  JudgeSamples(window_.front().start_us, last.start_us + last.dur_us, last.step);
  if (worker_) {
    JudgeOutliers();
    JudgeLoss();
  }
}

// The samples taken within [from_us, to_us], or the last one before it when none was.
void OnlineRules::JudgeSamples(int64_t from_us, int64_t to_us, int64_t step) {
  std::vector<const MonitorSample*> in;
  const MonitorSample* before = nullptr;
  for (const MonitorSample& s : samples_) {
    if (s.t_us < from_us) {
      before = &s;
    } else if (s.t_us <= to_us) {
      in.push_back(&s);
    }
  }
  // GPU utilisation is judged on samples taken within the window only: a sample is the
  // busy share of the period before it, so the one before the window describes other work
  // (on an H100 the sample of a run's start-up, plans and graph capture, read "busy 14%" for
  // a step at 5,580 img/s). One in-window sample may still straddle the window's start.
  const bool gpu_judgeable = in.size() >= kMinGpuSamples;
  if (in.empty() && before != nullptr) in.push_back(before);
  if (in.empty()) return;
  double iowait = 0, gpu_util = 0;
  size_t gpu_values = 0, gpu_samples = 0, gpus = 0;
  for (const MonitorSample* s : in) {
    iowait += s->iowait;
    if (!judge_gpus_ || !gpu_judgeable || s->gpus.empty()) continue;
    ++gpu_samples;
    size_t used = 0;
    for (size_t g = 0; g < s->gpus.size(); ++g) {
      const bool mine = gpu_indices_.empty() ||
                        std::find(gpu_indices_.begin(), gpu_indices_.end(), static_cast<int>(g)) != gpu_indices_.end();
      if (!mine) continue;
      gpu_util += s->gpus[g].util;
      ++used;
    }
    gpus = std::max(gpus, used);
    gpu_values += used;
  }
  iowait /= in.size();
  if (HoldsInWindow(kIoBottleneck, iowait > config_.iowait_percent)) {
    Fire(kIoBottleneck, step,
         Format("the CPUs wait for storage %.0f%% of the time (mean iowait of %s)", iowait,
                Count(in.size(), "sample").c_str()),
         "the data cannot be read fast enough: move it to faster local storage, leave memory free for the "
         "page cache, or raise --data-nthreads" + Now(meta_, "data_nthreads") + " to keep more reads in flight",
         Format("iowait=%.1f samples=%zu threshold=%g", iowait, in.size(), config_.iowait_percent));
  }
  if (gpu_values == 0) return;
  gpu_util /= gpu_values;
  if (HoldsInWindow(kLowGpuUtil, gpu_util < config_.gpu_util_percent)) {
    Fire(kLowGpuUtil, step,
         Format("the GPUs are busy %.0f%% of the time (mean over %s and %s)", gpu_util, Count(gpus, "GPU").c_str(),
                Count(gpu_samples, "sample").c_str()),
         "give them more work: raise --batch-size" + Now(meta_, "batch_size") +
             ", and see whether data loading (data_starvation) or communication (the wait share) keeps them idle",
         Format("gpu_util=%.1f gpus=%zu samples=%zu threshold=%g", gpu_util, gpus, gpu_samples,
                config_.gpu_util_percent));
  }
}

// Over the last kRecentWindows windows, so that a few slow steps in a row of windows show
// as a share rather than as three in one window.
void OnlineRules::JudgeOutliers() {
  std::vector<StepTime> times;
  for (const StepRecord& r : window_) times.push_back({r.step, r.dur_us});
  recent_times_.push_back(std::move(times));
  if (recent_times_.size() > kRecentWindows) recent_times_.pop_front();
  std::vector<double> durations;
  StepTime slowest{0, -1};
  for (const std::vector<StepTime>& w : recent_times_) {
    for (const StepTime& t : w) {
      durations.push_back(static_cast<double>(t.dur_us));
      if (t.dur_us > slowest.dur_us) slowest = t;
    }
  }
  const double median = Median(durations);
  const long outliers = std::count_if(durations.begin(), durations.end(),
                                      [&](double d) { return d > config_.outlier_factor * median; });
  const double share = static_cast<double>(outliers) / durations.size();
  if (!HoldsInWindow(kStepOutliers, outliers >= 3 && share > config_.outlier_share)) return;
  Fire(kStepOutliers, window_.back().step,
       Format("%ld of the last %zu steps took over %gx the median step time (slowest: step %lld, %s against %s)",
              outliers, durations.size(), config_.outlier_factor, static_cast<long long>(slowest.step),
              Ms(static_cast<double>(slowest.dur_us)).c_str(), Ms(median).c_str()),
       "find what those steps share in the trace (--profile): checkpoints, epoch starts, other jobs on the host, "
       "network or storage hiccups",
       Format("outliers=%ld steps=%zu median_us=%.0f slowest_step=%lld slowest_us=%lld factor=%g share=%g", outliers,
              durations.size(), median, static_cast<long long>(slowest.step), static_cast<long long>(slowest.dur_us),
              config_.outlier_factor, config_.outlier_share));
}

void OnlineRules::JudgeLoss() {
  double sum = 0;
  int n = 0;
  for (const StepRecord& r : window_) {
    if (r.samples > 0 && r.has_metrics && std::isfinite(r.loss)) {
      sum += r.loss;
      ++n;
    }
  }
  if (n == 0) return;
  const double mean = sum / n;
  if (loss_windows_++ == 0) {
    first_loss_ = mean;
    first_loss_step_ = window_.back().step;
    return;
  }
  if (loss_windows_ < config_.loss_windows || first_loss_ == 0) return;
  const double drop = (first_loss_ - mean) / std::fabs(first_loss_);
  if (!HoldsInWindow(kLossNotDecreasing, drop < config_.loss_min_drop)) return;
  Fire(kLossNotDecreasing, window_.back().step,
       Format("the loss is not decreasing: mean %.4g in the window to step %lld, %.4g now (%+.1f%%)", first_loss_,
              static_cast<long long>(first_loss_step_), mean, -100 * drop),
       "check the learning rate (--lr" + Now(meta_, "lr") + ": too high or too low), the labels of the data, "
       "and that the model gets the input it expects",
       Format("first_loss=%g first_step=%lld loss=%g drop=%.4f windows=%d threshold=%g", first_loss_,
              static_cast<long long>(first_loss_step_), mean, drop, loss_windows_, config_.loss_min_drop));
}

namespace {

// One node's own rules over its whole run: steps in order, each after the samples taken
// before it ended, as they would have arrived while training.
std::vector<Finding> Replay(const NodeRun& node, const RuleConfig& config) {
  OnlineRules rules(node.meta, config);
  size_t next = 0;
  for (const StepRecord& r : node.steps) {
    while (next < node.samples.size() && node.samples[next].t_us <= r.start_us + r.dur_us) {
      rules.AddSample(node.samples[next++]);
    }
    rules.AddStep(r);
  }
  return rules.TakeNew();
}

Finding JobFinding(const char* rule, std::string message, std::string advice, std::string evidence) {
  Finding f;
  f.rule = rule;
  f.node = "job";
  f.message = std::move(message);
  f.advice = std::move(advice);
  f.evidence = std::move(evidence);
  return f;
}

// Each worker's median time per step spent working: the step less its data wait and its
// wait for communication and the other workers (which a straggler lengthens on the others).
void CheckStragglers(const std::vector<NodeRun>& nodes, const RuleConfig& config, std::vector<Finding>* out) {
  std::vector<std::pair<std::string, double>> busy;
  for (const NodeRun& n : nodes) {
    if (n.meta.role != "worker") continue;
    std::vector<double> v;
    for (size_t i = std::max(config.warmup_steps, 0); i < n.steps.size(); ++i) {
      const StepRecord& r = n.steps[i];
      v.push_back(static_cast<double>(std::max<int64_t>(0, r.dur_us - r.phase(Phase::kWait) - r.phase(Phase::kData))));
    }
    if (!v.empty()) busy.emplace_back(n.meta.node, Median(v));
  }
  if (busy.size() < 2) return;
  std::string evidence;
  for (const auto& [node, us] : busy) evidence += Format("%s_busy_us=%.0f ", node.c_str(), us);
  evidence += Format("factor=%g", config.straggler_factor);
  for (size_t i = 0; i < busy.size(); ++i) {
    std::vector<double> others;
    for (size_t j = 0; j < busy.size(); ++j) {
      if (j != i) others.push_back(busy[j].second);
    }
    const double median = Median(others);
    if (median <= 0 || busy[i].second <= config.straggler_factor * median) continue;
    out->push_back(JobFinding(
        "straggler",
        Format("%s is a straggler: %s of work per step against %s on the other workers (%.2fx; median, data "
               "and communication waits left out)",
               busy[i].first.c_str(), Ms(busy[i].second).c_str(), Ms(median).c_str(), busy[i].second / median),
        "check that host (CPU contention, thermal throttling, other jobs on it) and its data shard; "
        "in a synchronous job every worker waits for it",
        evidence));
  }
}

// Each server's summing and optimizer time over the run (its payload bytes when no server
// recorded any time).
void CheckServerBalance(const std::vector<NodeRun>& nodes, const RuleConfig& config, std::vector<Finding>* out) {
  struct Load {
    std::string node;
    double us = 0, bytes = 0;
  };
  std::vector<Load> loads;
  for (const NodeRun& n : nodes) {
    if (n.meta.role != "server") continue;
    Load l{n.meta.node};
    for (const StepRecord& r : n.steps) {
      l.us += static_cast<double>(r.phase(Phase::kSum) + r.phase(Phase::kUpdate));
      l.bytes += static_cast<double>(r.bytes_in + r.bytes_out);
    }
    loads.push_back(l);
  }
  if (loads.size() < 2) return;
  double total_us = 0;
  for (const Load& l : loads) total_us += l.us;
  const bool by_time = total_us > 0;
  auto load = [&](const Load& l) { return by_time ? l.us : l.bytes; };
  double total = 0;
  const Load* busiest = &loads[0];
  std::string evidence;
  for (const Load& l : loads) {
    total += load(l);
    if (load(l) > load(*busiest)) busiest = &l;
    evidence += Format("%s_us=%.0f %s_bytes=%.0f ", l.node.c_str(), l.us, l.node.c_str(), l.bytes);
  }
  const double mean = total / loads.size();
  if (mean <= 0 || load(*busiest) <= config.imbalance_factor * mean) return;
  evidence += Format("measure=%s factor=%g", by_time ? "time" : "bytes", config.imbalance_factor);
  out->push_back(JobFinding(
      "server_imbalance",
      by_time ? Format("%s does %.2fx the mean server's work (%s summing and updating against a mean of %s)",
                       busiest->node.c_str(), busiest->us / mean, Ms(busiest->us).c_str(), Ms(mean).c_str())
              : Format("%s moves %.2fx the mean server's bytes (%.1f MB against a mean of %.1f MB)",
                       busiest->node.c_str(), busiest->bytes / mean, busiest->bytes / 1e6, mean / 1e6),
      "spread the keys: start more servers (tools/launch.py -s) or lower the big-array bound "
      "(kvstore/placement.h) so that large keys are sliced across every server",
      evidence));
}

}  // namespace

std::vector<Finding> CheckRun(const std::vector<NodeRun>& nodes, const RuleConfig& config) {
  std::vector<Finding> out;
  std::map<std::string, size_t> order;
  for (const NodeRun& n : nodes) {
    order.emplace(n.meta.node, order.size());
    std::vector<Finding> own = Replay(n, config);
    out.insert(out.end(), own.begin(), own.end());
  }
  CheckStragglers(nodes, config, &out);
  CheckServerBalance(nodes, config, &out);
  auto rank = [&](const Finding& f) {
    auto it = order.find(f.node);
    return it == order.end() ? order.size() : it->second;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Finding& a, const Finding& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a.step < b.step;
  });
  return out;
}

}  // namespace profile
}  // namespace tally
