// Learning-rate schedules: the learning rate of each optimizer update, as a pure function of
// the update's index and the schedule's configuration. Stateless and thread-safe.
//
//   LrScheduleConfig cfg;
//   cfg.base_lr = 0.4;  cfg.batches_per_epoch = 10;  cfg.num_epochs = 10;
//   cfg.scheduler = "poly";  cfg.warmup_epochs = 2;
//   TALLY_RETURN_IF_ERROR(ValidateLrSchedule(cfg));
//   for (int64_t step = 0; ...; ++step) trainer->SetLearningRate(LearningRate(step, cfg));
//
// The schedules are MXNet's (mxnet.lr_scheduler) as image-classification's fit.py sets them
// up. `step` counts this run's optimizer updates from 0; MXNet counts them from 1 (its
// optimizer bumps num_update before asking the scheduler), so below
//
//   n = begin_epoch * B + step + 1        the MXNet update number, B = batches_per_epoch
//   W = warmup_steps, or else warmup_epochs * B    warm-up updates (MXNet's warmup_steps)
//   N = num_epochs * B                    updates of the whole run (MXNet's max_update)
//
// Warm-up (every scheduler), while n < W:
//   linear:   lr = warmup_begin_lr + (base_lr - warmup_begin_lr) * n / W
//   constant: lr = warmup_begin_lr
// After warm-up:
//   step:     lr = base_lr * factor^k, k = the number of step epochs s with n > s * B, i.e. the
//             factor applies from the first update of epoch s on (MultiFactorScheduler).
//   poly:     lr = final_lr + (base_lr - final_lr) * (1 - (n - W) / (N - W))^pwr for n <= N,
//             else final_lr (PolyScheduler): the run's last update has final_lr.
//   cosine:   lr = final_lr + (base_lr - final_lr) * (1 + cos(pi * (n - W) / (N - W))) / 2 for
//             n <= N, else final_lr (CosineScheduler).
//
// begin_epoch resumes a run (MXNet's --load-epoch): steps count from the resumed epoch and
// the schedule continues where it left off, step factors already passed included. Unlike
// fit.py, which restarts warm-up on resume, warm-up is not repeated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally {

struct LrScheduleConfig {
  double base_lr = 0.1;           // after batch scaling (BatchScaledLr)
  int64_t batches_per_epoch = 1;  // optimizer updates per epoch
  int num_epochs = 1;             // epochs of the whole run, begin_epoch included
  int begin_epoch = 0;            // --load-epoch
  std::string scheduler = "step";  // --lr-scheduler: step, poly or cosine
  double factor = 0.1;             // --lr-factor (step)
  std::vector<int> step_epochs;    // --lr-step-epochs (step): positive, increasing
  int warmup_epochs = 0;           // --warmup-epochs
  std::string warmup_strategy = "linear";  // --warmup-strategy: linear or constant
  double warmup_begin_lr = 0;              // MXNet's warmup_begin_lr
  // MXNet's warmup_steps, in updates: when > 0, used instead of warmup_epochs (--warmup-steps).
  int64_t warmup_steps = 0;
  double pwr = 2;        // --lr-poly-power: PolyScheduler's pwr (poly)
  double final_lr = 0;   // --final-lr: PolyScheduler's and CosineScheduler's final_lr
};

// W above: the updates of warm-up.
int64_t WarmupUpdates(const LrScheduleConfig& config);

// Checks a configuration from user input; the message names the offending flag.
Status ValidateLrSchedule(const LrScheduleConfig& config);

// The learning rate of update `step` (from 0).
// REQUIRES: ValidateLrSchedule(config).ok(), step >= 0.
double LearningRate(int64_t step, const LrScheduleConfig& config);

// Parses --lr-step-epochs, such as "30,60" ("" : no steps).
Status ParseLrStepEpochs(const std::string& text, std::vector<int>* epochs);

// The linear scaling rule (Goyal et al.): lr * global_batch / lr_batch_scale when
// lr_batch_scale > 0, else lr. global_batch is the batch of one update over all workers.
Status BatchScaledLr(double lr, int64_t global_batch, int lr_batch_scale, double* scaled);

}  // namespace tally
