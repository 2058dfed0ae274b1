// Rules: find what makes a run slow or broken from its step records and monitor samples,
// and say in one line what to change. The same rules run while training (OnlineRules, one
// node's view) and in `tally report` (CheckRun, every node's view, which adds the rules
// that compare nodes: straggler worker, server load imbalance). docs/rules.md gives every
// rule, what it measures, its threshold and its advice; thresholds are set with
// --profile-rules "name=value,..." (ParseRuleConfig).
//
//   OnlineRules rules(meta, config);
//   rules.AddStep(record);                      // per step, on the training thread
//   for (const Finding& f : rules.TakeNew()) std::fprintf(stderr, "%s\n", f.Line().c_str());
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "profile/records.h"

namespace tally {
namespace profile {

struct RuleConfig {
  int warmup_steps = 5;             // steps at the start of a run (and of a resume) not judged
  int window = 20;                  // steps judged together
  double data_wait_share = 0.25;    // data_starvation: data wait / step time over a window
  double iowait_percent = 20;       // io_bottleneck: mean iowait over a window's samples
  double gpu_util_percent = 50;     // low_gpu_util: mean GPU utilisation (only with GPUs)
  double outlier_factor = 3;        // step_outliers: a step slower than this x the median...
  double outlier_share = 0.05;      // ...in more than this share of the steps (and >= 3 steps)
  double straggler_factor = 1.3;    // straggler: a worker's busy time > this x the others' median
  double imbalance_factor = 1.5;    // server_imbalance: busiest server's sum+update time / mean
  double loss_min_drop = 0.02;      // loss_not_decreasing: relative drop of the mean loss between
  int loss_windows = 5;             //   the first and the last window, judged after this many windows
  double grad_explode_factor = 10;  // exploding_gradients: norm > this x the running median
};

// "data_wait_share=0.3,window=50" (names as RuleConfig's fields; "" leaves config as it
// is): fails naming an unknown rule setting or a bad value, and lists the valid names.
// config is changed only when the whole spec is good.
Status ParseRuleConfig(const std::string& spec, RuleConfig* config);

// One node's rules while it trains. AddStep on the training thread, AddSample on the
// monitor's; TakeNew from either (thread-safe). The first warmup_steps steps are not
// judged (nan_inf excepted), and neither are those of a resumed run: a worker's step
// numbered at or below the previous one starts judging afresh. Steps are judged in windows
// of `window`, against the samples taken within the window; docs/rules.md says which rules
// judge which roles. A rule fires once, and again only after a window in which it did not
// hold.
class OnlineRules {
 public:
  OnlineRules(const NodeMeta& meta, const RuleConfig& config);
  void AddStep(const StepRecord& r);
  void AddSample(const MonitorSample& s);
  // The findings that fired since the last call.
  std::vector<Finding> TakeNew();

 private:
  enum Rule { kDataStarvation, kIoBottleneck, kLowGpuUtil, kStepOutliers, kLossNotDecreasing, kNanInf,
              kExplodingGradients, kNumRules };
  // Whether a rule may fire: once it has, only after a window in which it did not hold.
  struct Arm {
    bool armed = true;
    int clear_steps = 0;  // rules judged per step: steps in a row in which it did not hold
  };
  struct StepTime {
    int64_t step, dur_us;
  };

  // REQUIRES: mu_ held, for every member function below.
  void StartSegment();
  void CheckNanInf(const StepRecord& r);
  void CheckGradient(const StepRecord& r);
  void JudgeWindow();
  void JudgeSamples(int64_t from_us, int64_t to_us, int64_t step);
  void JudgeOutliers();
  void JudgeLoss();
  // A rule judged per window (per step): whether it fires now.
  bool HoldsInWindow(Rule rule, bool holds);
  bool HoldsAtStep(Rule rule, bool holds);
  void Fire(Rule rule, int64_t step, std::string message, std::string advice, std::string evidence);
  void TrimSamples();

  const NodeMeta meta_;
  const RuleConfig config_;
  const bool worker_;  // the data, loss, gradient and outlier rules judge workers only
  bool judge_gpus_ = false;       // low_gpu_util: workers, unless config "gpus" is ""
  std::vector<int> gpu_indices_;  // the monitor's GPUs the worker uses (config "gpus"); empty: all

  std::mutex mu_;
  // Everything below is GUARDED_BY(mu_).
  Arm arm_[kNumRules];
  bool have_step_ = false;
  int64_t last_step_ = 0;
  int64_t last_start_us_ = 0;
  int64_t segment_steps_ = 0;                       // steps since the run (or a resume) began
  int64_t nan_steps_ = 0;                           // steps with a non-finite loss or norm
  std::vector<StepRecord> window_;                  // judged steps of the window being filled
  std::deque<std::vector<StepTime>> recent_times_;  // the last windows' step times
  std::deque<double> recent_norms_;                 // grad norms of the last judged steps
  std::deque<MonitorSample> samples_;               // from just before window_ on
  int loss_windows_ = 0;                            // windows with a loss since the segment began
  double first_loss_ = 0;                           // the first one's mean loss
  int64_t first_loss_step_ = 0;                     // and its last step
  std::vector<Finding> new_;                        // fired since the last TakeNew
};

// A node's whole run, as read from a run directory.
struct NodeRun {
  NodeMeta meta;
  std::vector<StepRecord> steps;
  std::vector<MonitorSample> samples;
  std::vector<Finding> findings;  // those that fired while training
};

// Every rule over a whole run: each node's own (its steps and samples replayed through
// OnlineRules; NodeRun::findings is not read), then those comparing nodes (node "job",
// step -1). Sorted by node, in the order of `nodes` with "job" last, then by step.
std::vector<Finding> CheckRun(const std::vector<NodeRun>& nodes, const RuleConfig& config);

}  // namespace profile
}  // namespace tally
