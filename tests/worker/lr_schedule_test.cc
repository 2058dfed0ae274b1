// Learning-rate schedules against values worked out by hand from MXNet's formulas
// (worker/lr_schedule.h); the MXNet update number is step + 1.
#include "worker/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tally {
namespace {

constexpr double kTol = 1e-12;

// 10 epochs of 10 batches: updates 0..99.
LrScheduleConfig TenByTen(const std::string& scheduler, double base_lr) {
  LrScheduleConfig c;
  c.base_lr = base_lr;
  c.batches_per_epoch = 10;
  c.num_epochs = 10;
  c.scheduler = scheduler;
  return c;
}

TEST(LrSchedule, LinearWarmupThenPoly) {
  LrScheduleConfig c = TenByTen("poly", 0.4);
  c.warmup_epochs = 2;  // 20 updates
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_NEAR(LearningRate(0, c), 0.4 * 1 / 20, kTol);
  EXPECT_NEAR(LearningRate(5, c), 0.4 * 6 / 20, kTol);
  EXPECT_NEAR(LearningRate(19, c), 0.4, kTol);                    // n = 20: decay starts at (1 - 0)^2
  EXPECT_NEAR(LearningRate(20, c), 0.4 * 79 * 79 / 6400, kTol);  // (1 - 1/80)^2
  EXPECT_NEAR(LearningRate(60, c), 0.0950625, kTol);              // 0.4 * (1 - 41/80)^2
  EXPECT_NEAR(LearningRate(99, c), 0.0, kTol);                   // the last update
}

// MXNet's PolyScheduler as mxnet/lr_scheduler.py (1.9) runs it, kept apart from the code
// under test: a stateful object asked for update numbers 1, 2, ... that keeps the last lr it
// computed once num_update passes max_update.
struct MxnetPoly {
  double base_lr_orig, final_lr, pwr, warmup_begin_lr;
  int64_t max_update, warmup_steps;
  bool linear;
  double base_lr;
  double operator()(int64_t num_update) {
    if (num_update < warmup_steps) {
      if (!linear) return warmup_begin_lr;
      return warmup_begin_lr + (base_lr_orig - warmup_begin_lr) * double(num_update) / double(warmup_steps);
    }
    if (num_update <= max_update) {
      base_lr = final_lr + (base_lr_orig - final_lr) *
                               std::pow(1 - double(num_update - warmup_steps) / double(max_update - warmup_steps), pwr);
    }
    return base_lr;
  }
};

TEST(LrSchedule, PolyWithWarmupStepsPowerAndFinalLrByHand) {
  LrScheduleConfig c = TenByTen("poly", 2.5);  // N = 100
  c.warmup_steps = 25;
  c.warmup_begin_lr = 0.5;
  c.pwr = 3;
  c.final_lr = 0.5;
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_EQ(WarmupUpdates(c), 25);
  EXPECT_NEAR(LearningRate(4, c), 0.9, kTol);                      // n = 5: 0.5 + 2 * 5 / 25
  EXPECT_NEAR(LearningRate(24, c), 2.5, kTol);                     // n = 25: decay starts
  EXPECT_NEAR(LearningRate(49, c), 0.5 + 2.0 * 8 / 27, kTol);      // n = 50: (1 - 25/75)^3
  EXPECT_NEAR(LearningRate(99, c), 0.5, kTol);                     // n = N: final_lr
  EXPECT_NEAR(LearningRate(150, c), 0.5, kTol);                    // past N: final_lr kept
  c.warmup_strategy = "constant";
  EXPECT_NEAR(LearningRate(4, c), 0.5, kTol);
  c.warmup_epochs = 7;  // ignored: warmup_steps wins
  EXPECT_EQ(WarmupUpdates(c), 25);
}

TEST(LrSchedule, PolyMatchesMxnetsSchedulerAtEveryUpdate) {
  struct Case { int64_t warmup_steps; double pwr, final_lr, begin; bool linear; int begin_epoch; };
  for (const Case& k : {Case{0, 2, 0, 0, true, 0}, Case{13, 2, 1e-4, 0, true, 0}, Case{30, 0.5, 0.01, 0.1, true, 0},
                        Case{7, 1.7, 0.02, 0.05, false, 0}, Case{13, 2, 1e-4, 0, true, 3}}) {
    LrScheduleConfig c = TenByTen("poly", 3.2);
    c.warmup_steps = k.warmup_steps;
    c.pwr = k.pwr;
    c.final_lr = k.final_lr;
    c.warmup_begin_lr = k.begin;
    c.warmup_strategy = k.linear ? "linear" : "constant";
    c.begin_epoch = k.begin_epoch;
    ASSERT_TRUE(ValidateLrSchedule(c).ok());
    MxnetPoly mx{3.2, k.final_lr, k.pwr, k.begin, 100, k.warmup_steps, k.linear, 3.2};
    for (int64_t n = 1; n <= 110; ++n) {
      const double want = mx(n);
      const int64_t step = n - 1 - k.begin_epoch * 10;
      if (step < 0) continue;
      EXPECT_NEAR(LearningRate(step, c), want, 1e-12) << "update " << n << ", warm-up " << k.warmup_steps;
    }
  }
}

TEST(LrSchedule, StepFactorAtEpochBoundaries) {
  LrScheduleConfig c = TenByTen("step", 0.1);
  c.factor = 0.1;
  c.step_epochs = {3, 6};
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_NEAR(LearningRate(0, c), 0.1, kTol);
  EXPECT_NEAR(LearningRate(29, c), 0.1, kTol);   // last batch of epoch 2
  EXPECT_NEAR(LearningRate(30, c), 0.01, kTol);  // first batch of epoch 3
  EXPECT_NEAR(LearningRate(59, c), 0.01, kTol);
  EXPECT_NEAR(LearningRate(60, c), 0.001, kTol);
  EXPECT_NEAR(LearningRate(99, c), 0.001, kTol);
}

TEST(LrSchedule, StepResumesFromBeginEpoch) {
  LrScheduleConfig c = TenByTen("step", 0.1);
  c.step_epochs = {3, 6};
  c.begin_epoch = 4;  // step 0 is the first batch of epoch 4
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_NEAR(LearningRate(0, c), 0.01, kTol);
  EXPECT_NEAR(LearningRate(19, c), 0.01, kTol);  // last batch of epoch 5
  EXPECT_NEAR(LearningRate(20, c), 0.001, kTol);
}

TEST(LrSchedule, StepWithoutStepsIsConstantAfterWarmup) {
  LrScheduleConfig c = TenByTen("step", 0.4);
  c.warmup_epochs = 2;
  c.warmup_begin_lr = 0.1;
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_NEAR(LearningRate(9, c), 0.1 + 0.3 * 10 / 20, kTol);  // linear from warmup_begin_lr
  EXPECT_NEAR(LearningRate(19, c), 0.4, kTol);
  EXPECT_NEAR(LearningRate(99, c), 0.4, kTol);
}

TEST(LrSchedule, CosineFromBaseThroughHalfToZero) {
  LrScheduleConfig c = TenByTen("cosine", 0.2);
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  // n = 1: 0.2 * (1 + cos(pi / 100)) / 2, cos(pi / 100) = 0.99950656036573...
  EXPECT_NEAR(LearningRate(0, c), 0.2 * (1 + 0.99950656036573) / 2, 1e-12);
  EXPECT_NEAR(LearningRate(49, c), 0.1, kTol);  // n = 50: halfway, cos(pi / 2) = 0
  EXPECT_NEAR(LearningRate(99, c), 0.0, kTol);

  c.warmup_epochs = 2;  // decay over n = 20..100; halfway at n = 60
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_NEAR(LearningRate(9, c), 0.2 * 10 / 20, kTol);
  EXPECT_NEAR(LearningRate(19, c), 0.2, kTol);
  EXPECT_NEAR(LearningRate(59, c), 0.1, kTol);
  EXPECT_NEAR(LearningRate(99, c), 0.0, kTol);
}

TEST(LrSchedule, ConstantWarmupHoldsTheBeginLr) {
  LrScheduleConfig c = TenByTen("poly", 0.4);
  c.warmup_epochs = 2;
  c.warmup_strategy = "constant";
  c.warmup_begin_lr = 0.1;
  ASSERT_TRUE(ValidateLrSchedule(c).ok());
  EXPECT_NEAR(LearningRate(0, c), 0.1, kTol);
  EXPECT_NEAR(LearningRate(18, c), 0.1, kTol);
  EXPECT_NEAR(LearningRate(19, c), 0.4, kTol);
}

TEST(LrSchedule, LinearBatchScaling) {
  double lr = 0;
  ASSERT_TRUE(BatchScaledLr(0.1, 128 * 8, 256, &lr).ok());
  EXPECT_NEAR(lr, 0.4, kTol);
  ASSERT_TRUE(BatchScaledLr(0.1, 64, 256, &lr).ok());
  EXPECT_NEAR(lr, 0.025, kTol);
  ASSERT_TRUE(BatchScaledLr(0.1, 1024, 0, &lr).ok());
  EXPECT_NEAR(lr, 0.1, kTol);
  Status s = BatchScaledLr(0.1, 1024, -1, &lr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--lr-batch-scale"), std::string::npos) << s;
}

TEST(LrSchedule, ParsesStepEpochs) {
  std::vector<int> epochs;
  ASSERT_TRUE(ParseLrStepEpochs("30,60", &epochs).ok());
  EXPECT_EQ(epochs, (std::vector<int>{30, 60}));
  ASSERT_TRUE(ParseLrStepEpochs("", &epochs).ok());
  EXPECT_TRUE(epochs.empty());
  for (const char* bad : {"30,x", "30,", ",30", "30;60", "3.5"}) {
    Status s = ParseLrStepEpochs(bad, &epochs);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--lr-step-epochs"), std::string::npos) << bad << ": " << s;
  }
}

TEST(LrSchedule, BadConfigurationsNameTheFlag) {
  struct Case {
    const char* what;
    void (*change)(LrScheduleConfig*);
    const char* flag;
  } cases[] = {
      {"unknown scheduler", [](LrScheduleConfig* c) { c->scheduler = "foo"; }, "--lr-scheduler"},
      {"unknown warm-up", [](LrScheduleConfig* c) { c->warmup_strategy = "exp"; }, "--warmup-strategy"},
      {"negative warm-up", [](LrScheduleConfig* c) { c->warmup_epochs = -1; }, "--warmup-epochs"},
      {"negative begin epoch", [](LrScheduleConfig* c) { c->begin_epoch = -1; }, "--load-epoch"},
      {"no epochs", [](LrScheduleConfig* c) { c->num_epochs = 0; }, "--num-epochs"},
      {"zero factor", [](LrScheduleConfig* c) { c->factor = 0; }, "--lr-factor"},
      {"decreasing steps", [](LrScheduleConfig* c) { c->step_epochs = {6, 3}; }, "--lr-step-epochs"},
      {"repeated step", [](LrScheduleConfig* c) { c->step_epochs = {3, 3}; }, "--lr-step-epochs"},
      {"negative step", [](LrScheduleConfig* c) { c->step_epochs = {-3}; }, "--lr-step-epochs"},
      {"poly all warm-up",
       [](LrScheduleConfig* c) {
         c->scheduler = "poly";
         c->warmup_epochs = 10;
       },
       "--warmup-epochs"},
      {"poly all warm-up steps",
       [](LrScheduleConfig* c) {
         c->scheduler = "poly";
         c->warmup_steps = 100;
       },
       "--warmup-steps"},
      {"negative warm-up steps", [](LrScheduleConfig* c) { c->warmup_steps = -1; }, "--warmup-steps"},
      {"zero power", [](LrScheduleConfig* c) { c->pwr = 0; }, "--lr-poly-power"},
      {"final above base", [](LrScheduleConfig* c) { c->final_lr = 0.2; }, "--final-lr"},
      {"negative final", [](LrScheduleConfig* c) { c->final_lr = -0.1; }, "--final-lr"},
  };
  for (const Case& k : cases) {
    LrScheduleConfig c = TenByTen("step", 0.1);
    k.change(&c);
    Status s = ValidateLrSchedule(c);
    EXPECT_FALSE(s.ok()) << k.what;
    EXPECT_NE(s.message().find(k.flag), std::string::npos) << k.what << ": " << s;
  }
}

}  // namespace
}  // namespace tally
