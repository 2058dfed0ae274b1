// The rules on synthetic step records and monitor samples: each fires on data made to
// trigger it and stays quiet on a healthy run; thresholds, warmup, fire-once-then-rearm,
// and the rules that compare nodes.
#include "profile/rules.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tally {
namespace profile {
namespace {

constexpr int64_t kStepUs = 100000;  // healthy steps take about 100 ms
constexpr int64_t kSampleUs = 250000;

NodeMeta Meta(const std::string& role, int rank) {
  NodeMeta m;
  m.role = role;
  m.rank = rank;
  m.node = role + "-" + std::to_string(rank);
  if (role == "worker") m.config["data_nthreads"] = "2";
  return m;
}

// A healthy worker step: small jitter, 2% data wait, loss falling, steady gradients.
StepRecord HealthyStep(int64_t step) {
  StepRecord r;
  r.step = step;
  r.epoch = 0;
  r.batch = step;
  r.start_us = step * kStepUs;
  r.dur_us = kStepUs + ((step * 7) % 5 - 2) * 1000;
  r.phase(Phase::kData) = 2000;
  r.phase(Phase::kForward) = 30000;
  r.phase(Phase::kBackward) = 50000;
  r.phase(Phase::kWait) = 15000;
  r.samples = 64;
  r.loss = 2.3 * std::exp(-step / 200.0) + 0.01 * ((step * 3) % 5);
  r.accuracy = 0.5;
  r.grad_norm = 5 + 0.1 * ((step * 11) % 7);
  return r;
}

// n steps from step 0, each made healthy and then changed by `change`.
std::vector<StepRecord> Steps(int n, const std::function<void(StepRecord*)>& change = nullptr) {
  std::vector<StepRecord> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(HealthyStep(i));
    if (change) change(&out.back());
  }
  return out;
}

// Samples every 250 ms over the steps' span, changed by `change`.
std::vector<MonitorSample> Samples(const std::vector<StepRecord>& steps,
                                   const std::function<void(MonitorSample*)>& change = nullptr) {
  std::vector<MonitorSample> out;
  const int64_t end = steps.back().start_us + steps.back().dur_us;
  for (int64_t t = kSampleUs; t <= end; t += kSampleUs) {
    MonitorSample s;
    s.t_us = t;
    s.cpu = {40, 35};
    s.cpu_total = 37.5;
    s.iowait = 1;
    s.mem_used = 1 << 30;
    s.mem_total = 4LL << 30;
    if (change) change(&s);
    out.push_back(s);
  }
  return out;
}

// One node through OnlineRules, the samples arriving as they would while training.
std::vector<Finding> Online(const NodeMeta& meta, const std::vector<StepRecord>& steps,
                            const std::vector<MonitorSample>& samples = {}, const RuleConfig& config = {}) {
  OnlineRules rules(meta, config);
  std::vector<Finding> out;
  size_t next = 0;
  for (const StepRecord& r : steps) {
    while (next < samples.size() && samples[next].t_us <= r.start_us + r.dur_us) rules.AddSample(samples[next++]);
    rules.AddStep(r);
    for (Finding& f : rules.TakeNew()) out.push_back(f);
  }
  return out;
}

std::vector<std::string> Rules(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const Finding& f : findings) out.push_back(f.rule);
  return out;
}

std::string Lines(const std::vector<Finding>& findings) {
  std::string out;
  for (const Finding& f : findings) out += f.Line() + "\n";
  return out;
}

RuleConfig Config(const std::string& spec) {
  RuleConfig c;
  Status s = ParseRuleConfig(spec, &c);
  EXPECT_TRUE(s.ok()) << s;
  return c;
}

// With warmup 5 and window 20, window w holds steps 5 + 20w .. 24 + 20w.
int64_t WindowEnd(int w) { return 24 + 20 * w; }
bool InWindow(int64_t step, int w) { return step >= 5 + 20 * w && step <= WindowEnd(w); }

void Starve(StepRecord* r) {
  r->phase(Phase::kData) = 60000;
  r->dur_us = 160000;
}

TEST(OnlineRulesTest, HealthyRunFiresNothing) {
  std::vector<StepRecord> steps = Steps(400);
  std::vector<Finding> f = Online(Meta("worker", 0), steps, Samples(steps));
  EXPECT_TRUE(f.empty()) << Lines(f);
}

TEST(OnlineRulesTest, DataStarvationFiresOnceWithAdvice) {
  std::vector<StepRecord> steps = Steps(200, Starve);
  std::vector<Finding> f = Online(Meta("worker", 1), steps, Samples(steps));
  ASSERT_EQ(Rules(f), std::vector<std::string>{"data_starvation"}) << Lines(f);
  EXPECT_EQ(f[0].node, "worker-1");
  EXPECT_EQ(f[0].step, WindowEnd(0));
  EXPECT_EQ(f[0].message, "data loading takes 38% of the step (data wait 60 ms of 160 ms)");
  EXPECT_EQ(f[0].advice, "raise --data-nthreads (now 2) or lighten augmentation; the decode threads cannot keep up");
  EXPECT_NE(f[0].evidence.find("share=0.375"), std::string::npos) << f[0].evidence;
  EXPECT_NE(f[0].Line().find("worker-1 step 24: data_starvation: "), std::string::npos) << f[0].Line();
}

TEST(OnlineRulesTest, DataStarvationAdviceWithoutAThreadCount) {
  NodeMeta meta = Meta("worker", 0);
  meta.config.clear();
  std::vector<Finding> f = Online(meta, Steps(40, Starve));
  ASSERT_EQ(Rules(f), std::vector<std::string>{"data_starvation"}) << Lines(f);
  EXPECT_EQ(f[0].advice.compare(0, 25, "raise --data-nthreads or "), 0) << f[0].advice;
}

TEST(OnlineRulesTest, ThresholdFromTheSpecChangesTheOutcome) {
  std::vector<StepRecord> steps = Steps(100, Starve);
  EXPECT_EQ(Rules(Online(Meta("worker", 0), steps, {}, Config("data_wait_share=0.4"))).size(), 0u);
  EXPECT_EQ(Rules(Online(Meta("worker", 0), steps, {}, Config("data_wait_share=0.3"))),
            std::vector<std::string>{"data_starvation"});
}

TEST(OnlineRulesTest, ServersAreNotJudgedForDataOrLoss) {
  std::vector<StepRecord> steps = Steps(200, [](StepRecord* r) {
    Starve(r);
    r->loss = 2.3;
  });
  EXPECT_TRUE(Online(Meta("server", 0), steps).empty());
}

TEST(OnlineRulesTest, FiresOnceThenRearmsAfterAWindowWithoutIt) {
  // Starved in windows 0-2 and 4-6; window 3 is healthy and re-arms the rule.
  std::vector<StepRecord> steps = Steps(WindowEnd(6) + 1, [](StepRecord* r) {
    if (!InWindow(r->step, 3)) Starve(r);
  });
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  ASSERT_EQ(Rules(f), std::vector<std::string>({"data_starvation", "data_starvation"})) << Lines(f);
  EXPECT_EQ(f[0].step, WindowEnd(0));
  EXPECT_EQ(f[1].step, WindowEnd(4));
}

TEST(OnlineRulesTest, WarmupStepsAreIgnored) {
  // The first 5 steps wait a second for data and are 11x slower than the rest.
  std::vector<StepRecord> steps = Steps(100, [](StepRecord* r) {
    if (r->step < 5) {
      r->phase(Phase::kData) = 1000000;
      r->dur_us = 1100000;
    }
  });
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  EXPECT_TRUE(f.empty()) << Lines(f);
  // Judged, they would have fired.
  EXPECT_EQ(Rules(Online(Meta("worker", 0), steps, {}, Config("warmup_steps=0"))),
            std::vector<std::string>({"data_starvation", "step_outliers"}));
}

TEST(OnlineRulesTest, AResumedRunHasItsOwnWarmup) {
  // Steps 0..99, then a resume from step 60 whose first 5 steps are starved.
  std::vector<StepRecord> steps = Steps(100);
  for (int64_t i = 60; i < 160; ++i) {
    StepRecord r = HealthyStep(i);
    r.start_us += 100 * kStepUs;
    if (i < 65) {
      r.phase(Phase::kData) = 1000000;
      r.dur_us = 1100000;
    }
    steps.push_back(r);
  }
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  EXPECT_TRUE(f.empty()) << Lines(f);
}

TEST(OnlineRulesTest, IoBottleneckFromIowait) {
  std::vector<StepRecord> steps = Steps(100);
  auto iowait = [](double percent) { return [percent](MonitorSample* s) { s->iowait = percent; }; };
  std::vector<Finding> f = Online(Meta("worker", 0), steps, Samples(steps, iowait(40)));
  ASSERT_EQ(Rules(f), std::vector<std::string>{"io_bottleneck"}) << Lines(f);
  EXPECT_EQ(f[0].step, WindowEnd(0));
  EXPECT_NE(f[0].message.find("40%"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].advice.find("--data-nthreads"), std::string::npos) << f[0].advice;
  EXPECT_TRUE(Online(Meta("worker", 0), steps, Samples(steps, iowait(10))).empty());
  EXPECT_TRUE(Online(Meta("worker", 0), steps, Samples(steps, iowait(40)), Config("iowait_percent=50")).empty());
  // Servers' machines are judged too.
  EXPECT_EQ(Rules(Online(Meta("server", 0), steps, Samples(steps, iowait(40)))),
            std::vector<std::string>{"io_bottleneck"});
}

TEST(OnlineRulesTest, WindowShorterThanTheSampleIntervalUsesTheLastSample) {
  // 20 steps of 10 ms: no sample falls inside a window.
  std::vector<StepRecord> steps = Steps(100, [](StepRecord* r) {
    r->start_us = r->step * 10000;
    r->dur_us = 10000;
  });
  MonitorSample s;
  s.t_us = 1000;
  s.iowait = 60;
  std::vector<Finding> f = Online(Meta("worker", 0), steps, {s});
  EXPECT_EQ(Rules(f), std::vector<std::string>{"io_bottleneck"}) << Lines(f);
}

TEST(OnlineRulesTest, LowGpuUtilisationOnlyWithGpus) {
  std::vector<StepRecord> steps = Steps(100);
  auto gpus = [](double util) {
    return [util](MonitorSample* s) { s->gpus = {{util, 1 << 30, 16LL << 30}, {util + 10, 1 << 30, 16LL << 30}}; };
  };
  std::vector<Finding> f = Online(Meta("worker", 0), steps, Samples(steps, gpus(20)));
  ASSERT_EQ(Rules(f), std::vector<std::string>{"low_gpu_util"}) << Lines(f);
  EXPECT_NE(f[0].message.find("25%"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].message.find("2 GPUs"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].advice.find("--batch-size"), std::string::npos) << f[0].advice;
  EXPECT_TRUE(Online(Meta("worker", 0), steps, Samples(steps, gpus(85))).empty());
  EXPECT_TRUE(Online(Meta("worker", 0), steps, Samples(steps, gpus(20)), Config("gpu_util_percent=10")).empty());
}

// A window with fewer than two samples of its own is not judged for the GPUs: the sample
// before it describes the period before it (a run's start-up, say), not its steps.
TEST(OnlineRulesTest, LowGpuUtilisationNeedsSamplesWithinTheWindow) {
  std::vector<StepRecord> steps = Steps(100);
  std::vector<MonitorSample> all =
      Samples(steps, [](MonitorSample* s) { s->gpus = {{14, 0, 0}}; });
  ASSERT_GE(all.size(), 3u);
  std::vector<MonitorSample> one = {all[0]};  // taken before the first judged window
  EXPECT_TRUE(Online(Meta("worker", 0), steps, one).empty()) << Lines(Online(Meta("worker", 0), steps, one));
  EXPECT_EQ(Rules(Online(Meta("worker", 0), steps, all)), std::vector<std::string>{"low_gpu_util"});
}

TEST(OnlineRulesTest, LowGpuUtilisationCountsTheWorkersOwnGpus) {
  std::vector<StepRecord> steps = Steps(100);
  std::vector<MonitorSample> samples =
      Samples(steps, [](MonitorSample* s) { s->gpus = {{20, 0, 0}, {60, 0, 0}}; });
  auto with_gpus = [](const char* gpus) {
    NodeMeta m = Meta("worker", 0);
    m.config["gpus"] = gpus;
    return m;
  };
  std::vector<Finding> f = Online(with_gpus("0"), steps, samples);
  ASSERT_EQ(Rules(f), std::vector<std::string>{"low_gpu_util"}) << Lines(f);
  EXPECT_NE(f[0].message.find("20% of the time (mean over 1 GPU and 9 samples)"), std::string::npos) << f[0].message;
  EXPECT_TRUE(Online(with_gpus("1"), steps, samples).empty());
  EXPECT_EQ(Rules(Online(Meta("worker", 0), steps, samples)), std::vector<std::string>{"low_gpu_util"});  // 40%
  // A CPU worker on a GPU host, and a server, leave the GPUs alone.
  EXPECT_TRUE(Online(with_gpus(""), steps, samples).empty());
  EXPECT_TRUE(Online(Meta("server", 0), steps, samples).empty());
}

TEST(OnlineRulesTest, StepOutliersNameTheSlowestStep) {
  // Every tenth step takes 500 ms, step 30 800 ms: 2 in window 0, 4 of 40 steps by window 1.
  std::vector<StepRecord> steps = Steps(100, [](StepRecord* r) {
    if (r->step % 10 == 0) r->dur_us = r->step == 30 ? 800000 : 500000;
  });
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  ASSERT_EQ(Rules(f), std::vector<std::string>{"step_outliers"}) << Lines(f);
  EXPECT_EQ(f[0].step, WindowEnd(1));
  EXPECT_NE(f[0].message.find("4 of the last 40 steps"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].message.find("step 30, 800 ms"), std::string::npos) << f[0].message;
  EXPECT_TRUE(Online(Meta("worker", 0), steps, {}, Config("outlier_share=0.2")).empty());
  EXPECT_TRUE(Online(Meta("worker", 0), steps, {}, Config("outlier_factor=10")).empty());
}

TEST(OnlineRulesTest, TwoOutliersAreNotEnough) {
  std::vector<StepRecord> steps = Steps(200, [](StepRecord* r) {
    if (r->step == 40 || r->step == 41) r->dur_us = 900000;
  });
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  EXPECT_TRUE(f.empty()) << Lines(f);
}

TEST(OnlineRulesTest, LossNotDecreasing) {
  std::vector<StepRecord> steps = Steps(300, [](StepRecord* r) { r->loss = 2.3 + 0.01 * ((r->step * 3) % 5); });
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  ASSERT_EQ(Rules(f), std::vector<std::string>{"loss_not_decreasing"}) << Lines(f);
  EXPECT_EQ(f[0].step, WindowEnd(4));  // judged after loss_windows = 5 windows
  EXPECT_NE(f[0].advice.find("--lr"), std::string::npos) << f[0].advice;
  f = Online(Meta("worker", 0), steps, {}, Config("loss_windows=10"));
  ASSERT_EQ(Rules(f), std::vector<std::string>{"loss_not_decreasing"}) << Lines(f);
  EXPECT_EQ(f[0].step, WindowEnd(9));
}

TEST(OnlineRulesTest, LossDropThresholdIsConfigurable) {
  // The loss falls 4% between the first and the fifth window.
  std::vector<StepRecord> steps = Steps(105, [](StepRecord* r) { r->loss = 2.0 - 0.001 * r->step; });
  EXPECT_TRUE(Online(Meta("worker", 0), steps).empty());
  EXPECT_EQ(Rules(Online(Meta("worker", 0), steps, {}, Config("loss_min_drop=0.1"))),
            std::vector<std::string>{"loss_not_decreasing"});
}

TEST(OnlineRulesTest, NanInfFiresAtOnceEvenInWarmup) {
  std::vector<StepRecord> steps = Steps(100, [](StepRecord* r) {
    if (r->step >= 2 && r->step <= 4) r->loss = std::nan("");
    if (r->step == 60) r->grad_norm = INFINITY;
  });
  std::vector<Finding> f = Online(Meta("worker", 0), steps);
  ASSERT_EQ(Rules(f), std::vector<std::string>({"nan_inf", "nan_inf"})) << Lines(f);
  EXPECT_EQ(f[0].step, 2);
  EXPECT_EQ(f[0].message, "the loss is nan");
  EXPECT_NE(f[0].advice.find("--lr"), std::string::npos) << f[0].advice;
  EXPECT_NE(f[0].evidence.find("non_finite_steps=1"), std::string::npos) << f[0].evidence;
  // Re-armed after 20 clean steps: the infinite gradient norm at step 60 fires again.
  EXPECT_EQ(f[1].step, 60);
  EXPECT_EQ(f[1].message, "the gradient norm is inf");
  EXPECT_NE(f[1].evidence.find("non_finite_steps=4"), std::string::npos) << f[1].evidence;
}

TEST(OnlineRulesTest, ExplodingGradients) {
  auto spike = [](double norm) {
    return [norm](StepRecord* r) {
      if (r->step == 80) r->grad_norm = norm;
    };
  };
  std::vector<Finding> f = Online(Meta("worker", 0), Steps(100, spike(100)));
  ASSERT_EQ(Rules(f), std::vector<std::string>{"exploding_gradients"}) << Lines(f);
  EXPECT_EQ(f[0].step, 80);
  EXPECT_NE(f[0].message.find("jumped to 100"), std::string::npos) << f[0].message;
  EXPECT_TRUE(Online(Meta("worker", 0), Steps(100, spike(40))).empty());
  EXPECT_EQ(Rules(Online(Meta("worker", 0), Steps(100, spike(40)), {}, Config("grad_explode_factor=5"))),
            std::vector<std::string>{"exploding_gradients"});
  // Not before `window` earlier norms: a spike at the first judged step is not judged.
  EXPECT_TRUE(Online(Meta("worker", 0), Steps(100, [](StepRecord* r) {
                if (r->step == 5) r->grad_norm = 1000;
              })).empty());
}

TEST(ParseRuleConfigTest, SetsEveryField) {
  RuleConfig c;
  ASSERT_TRUE(ParseRuleConfig(
                  "warmup_steps=3, window=50,data_wait_share=0.3,iowait_percent=30,gpu_util_percent=40,"
                  "outlier_factor=4,outlier_share=0.1,straggler_factor=1.5,imbalance_factor=2,"
                  "loss_min_drop=0.05,loss_windows=8,grad_explode_factor=20",
                  &c)
                  .ok());
  EXPECT_EQ(c.warmup_steps, 3);
  EXPECT_EQ(c.window, 50);
  EXPECT_EQ(c.data_wait_share, 0.3);
  EXPECT_EQ(c.iowait_percent, 30);
  EXPECT_EQ(c.gpu_util_percent, 40);
  EXPECT_EQ(c.outlier_factor, 4);
  EXPECT_EQ(c.outlier_share, 0.1);
  EXPECT_EQ(c.straggler_factor, 1.5);
  EXPECT_EQ(c.imbalance_factor, 2);
  EXPECT_EQ(c.loss_min_drop, 0.05);
  EXPECT_EQ(c.loss_windows, 8);
  EXPECT_EQ(c.grad_explode_factor, 20);
}

TEST(ParseRuleConfigTest, EmptySpecKeepsTheDefaults) {
  RuleConfig c;
  ASSERT_TRUE(ParseRuleConfig("", &c).ok());
  EXPECT_EQ(c.window, RuleConfig().window);
  EXPECT_EQ(c.data_wait_share, RuleConfig().data_wait_share);
}

TEST(ParseRuleConfigTest, ErrorsNameTheSettingAndLeaveTheConfigAlone) {
  struct Case {
    const char* spec;
    const char* expect;
  };
  for (const Case& k : {Case{"data_wait=0.3", "unknown rule setting \"data_wait\""},
                        Case{"window=abc", "window=abc: not an integer"},
                        Case{"window=2.5", "window=2.5: not an integer"},
                        Case{"window=1", "window=1: give 2..1000000"},
                        Case{"data_wait_share=1.5", "data_wait_share=1.5: give 0..1"},
                        Case{"outlier_factor=1", "outlier_factor=1: give more than 1"},
                        Case{"iowait_percent=", "iowait_percent=: not a number"},
                        Case{"gpu_util_percent=nan", "gpu_util_percent=nan: not a number"},
                        Case{"window=30,straggler", "\"straggler\": give name=value"}}) {
    RuleConfig c;
    Status s = ParseRuleConfig(k.spec, &c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << k.spec;
    EXPECT_NE(s.message().find(k.expect), std::string::npos) << k.spec << ": " << s;
    EXPECT_EQ(c.window, RuleConfig().window) << k.spec;
  }
  RuleConfig c;
  Status s = ParseRuleConfig("bogus=1", &c);
  EXPECT_NE(s.message().find("valid: warmup_steps, window, data_wait_share"), std::string::npos) << s;
  EXPECT_NE(s.message().find("grad_explode_factor"), std::string::npos) << s;
}

NodeRun Run(const std::string& role, int rank, std::vector<StepRecord> steps) {
  NodeRun n;
  n.meta = Meta(role, rank);
  n.steps = std::move(steps);
  return n;
}

// A server step: `work_us` of summing and updating.
std::vector<StepRecord> ServerSteps(int n, int64_t work_us) {
  std::vector<StepRecord> out;
  for (int i = 0; i < n; ++i) {
    StepRecord r;
    r.step = i;
    r.start_us = i * kStepUs;
    r.dur_us = 40000;
    r.phase(Phase::kSum) = work_us / 4;
    r.phase(Phase::kUpdate) = work_us - work_us / 4;
    r.requests = 4;
    r.bytes_in = r.bytes_out = 1 << 20;
    out.push_back(r);
  }
  return out;
}

std::vector<NodeRun> BalancedJob() {
  std::vector<NodeRun> nodes;
  nodes.push_back(Run("server", 0, ServerSteps(100, 10000)));
  nodes.push_back(Run("server", 1, ServerSteps(100, 11000)));
  for (int w = 0; w < 3; ++w) nodes.push_back(Run("worker", w, Steps(100)));
  return nodes;
}

TEST(CheckRunTest, BalancedJobFiresNothing) {
  std::vector<Finding> f = CheckRun(BalancedJob(), RuleConfig());
  EXPECT_TRUE(f.empty()) << Lines(f);
}

TEST(CheckRunTest, FindsTheStraggler) {
  std::vector<NodeRun> nodes = BalancedJob();
  // worker-2 computes 50% longer; the others wait for it.
  for (StepRecord& r : nodes[4].steps) {
    r.phase(Phase::kBackward) += 45000;
    r.phase(Phase::kWait) = 0;
    r.dur_us += 30000;
  }
  for (int w : {2, 3}) {
    for (StepRecord& r : nodes[w].steps) {
      r.phase(Phase::kWait) += 30000;
      r.dur_us += 30000;
    }
  }
  std::vector<Finding> f = CheckRun(nodes, RuleConfig());
  ASSERT_EQ(Rules(f), std::vector<std::string>{"straggler"}) << Lines(f);
  EXPECT_EQ(f[0].node, "job");
  EXPECT_EQ(f[0].step, -1);
  EXPECT_EQ(f[0].message.compare(0, 27, "worker-2 is a straggler: 12"), 0) << f[0].message;
  EXPECT_NE(f[0].evidence.find("worker-0_busy_us="), std::string::npos) << f[0].evidence;
  EXPECT_TRUE(CheckRun(nodes, Config("straggler_factor=2")).empty());
}

TEST(CheckRunTest, FindsTheBusiestServer) {
  std::vector<NodeRun> nodes = BalancedJob();
  nodes[1].steps = ServerSteps(100, 40000);  // 40 ms against 10 ms: 1.6x the mean
  std::vector<Finding> f = CheckRun(nodes, RuleConfig());
  ASSERT_EQ(Rules(f), std::vector<std::string>{"server_imbalance"}) << Lines(f);
  EXPECT_EQ(f[0].node, "job");
  EXPECT_EQ(f[0].message.compare(0, 26, "server-1 does 1.60x the me"), 0) << f[0].message;
  EXPECT_NE(f[0].advice.find("-s"), std::string::npos) << f[0].advice;
  EXPECT_TRUE(CheckRun(nodes, Config("imbalance_factor=1.7")).empty());
  // One server has no one to be compared with.
  nodes.erase(nodes.begin());
  EXPECT_TRUE(CheckRun(nodes, RuleConfig()).empty());
}

TEST(CheckRunTest, ReplaysEachNodeAndSortsByNodeThenStep) {
  std::vector<NodeRun> nodes = BalancedJob();
  nodes[1].steps = ServerSteps(100, 40000);
  nodes[4].steps = Steps(100, [](StepRecord* r) {
    if (r->step == 70) r->loss = INFINITY;
  });
  nodes[3].steps = Steps(100, Starve);
  nodes[3].samples = Samples(nodes[3].steps, [](MonitorSample* s) { s->iowait = 50; });
  std::vector<Finding> f = CheckRun(nodes, RuleConfig());
  std::vector<std::string> got;
  for (const Finding& x : f) got.push_back(x.node + " " + x.rule + " " + std::to_string(x.step));
  EXPECT_EQ(got, std::vector<std::string>({"worker-1 data_starvation 24", "worker-1 io_bottleneck 24",
                                           "worker-2 nan_inf 70", "job server_imbalance -1"}))
      << Lines(f);
}

}  // namespace
}  // namespace profile
}  // namespace tally
