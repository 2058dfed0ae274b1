// Rules: find what makes a run slow or broken from its step records and monitor samples,
// and say in one line what to change. The same rules run while training (OnlineRules, one
// node's view) and in `tally report` (CheckRun, every node's view, which adds the rules
// that compare nodes: straggler worker, server load imbalance). Thresholds are documented
// in docs/profile.md and set with --profile-rules "name=value,...".
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "ops/profile/records.h"
#include "ops/status.h"

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

// "data_wait_share=0.3,window=50": fails naming an unknown rule setting or a bad value.
Status ParseRuleConfig(const std::string& spec, RuleConfig* config);

// One node's rules while it trains. AddStep on the training thread, AddSample on the
// monitor's; TakeNew from either. A rule fires once, and again only after a window
// in which it did not hold.
class OnlineRules {
 public:
  OnlineRules(const NodeMeta& meta, const RuleConfig& config);
  void AddStep(const StepRecord& r);
  void AddSample(const MonitorSample& s);
  // The findings that fired since the last call.
  std::vector<Finding> TakeNew();
};

// A node's whole run, as read from a run directory.
struct NodeRun {
  NodeMeta meta;
  std::vector<StepRecord> steps;
  std::vector<MonitorSample> samples;
  std::vector<Finding> findings;  // those that fired while training
};

// Every rule over a whole run: each node's own, then those comparing nodes.
std::vector<Finding> CheckRun(const std::vector<NodeRun>& nodes, const RuleConfig& config);

}  // namespace profile
}  // namespace tally
