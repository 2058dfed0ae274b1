// Fit: the training loop, epochs of batches through a Trainer, as MXNet's Module.fit. What
// a run does around the loop (the Speedometer's line, checkpoints, the profiler's records,
// a progress bar) it asks of callbacks, so that `tally train` (tools/train_command.cc) is
// flag handling and wiring, and tests drive the loop directly.
//
//   FitOptions options;
//   options.num_epochs = 3;
//   options.lr = lr_schedule;  // complete: batches_per_epoch and base_lr set
//   options.initial_lr = config.optimizer.lr;
//   FitCallbacks callbacks;
//   callbacks.speedometer = [&](const SpeedometerWindow& w) {
//     std::printf("%s\n", SpeedometerLine(w, options.top_k, "").c_str());
//   };
//   callbacks.checkpoint = [&](int64_t epoch, int64_t batch, int64_t step) { return Save(...); };
//   FitResult result;
//   Status s = Fit(trainer.get(), train.get(), val.get(), options, callbacks, &result);
//
// Fit prints MXNet's epoch lines to options.log: "Epoch[E] lr=...", a step skipped for a
// non-finite gradient, "Epoch[E] Train-accuracy=...", "Epoch[E] Time cost=...",
// "Epoch[E] Validation-accuracy=..." and the line of a stop. Every callback is optional.
//
// An elastic source (`tally train --elastic`, BatchSource::elastic) says at each step which
// epoch and batch it is and how long the epoch is as far as known (a worker's leave makes
// the rest of the epoch longer, a join shorter): Fit ends an epoch where the source's next
// step is in the next one, settling the step in flight when the source asks, and sets the
// lr at the source's schedule position. begin_epoch and begin_batch then only name the
// start in a leave's line; begin_step is where the source starts.
// Driven by one thread; the callbacks run on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "kvstore/kvstore.h"
#include "profile/records.h"
#include "base/status.h"
#include "worker/batch_source.h"
#include "worker/lr_schedule.h"
#include "worker/trainer.h"

namespace tally {

struct FitOptions {
  int num_epochs = 1;  // of the whole run, the resumed part included
  // Where the run starts: a resumed run continues at its checkpoint's epoch, batch and step.
  int64_t begin_epoch = 0, begin_batch = 0, begin_step = 0;
  int disp_batches = 20;  // the Speedometer's window, in batches
  int save_period = 1;    // a checkpoint every this many epochs, and after the last
  // The learning rate of every update. REQUIRES: ValidateLrSchedule(lr).ok() with
  // batches_per_epoch the training source's.
  LrScheduleConfig lr;
  // The lr the trainer was created with: Fit sets the lr only when it changes, since in the
  // dist modes every change is a message to the servers.
  float initial_lr = 0.1f;
  int top_k = 0;  // the metrics name top-k accuracy when > 1
  int rank = 0;   // this worker, in failure messages
  KVStoreType kv_store = KVStoreType::kDevice;  // the wording of a skipped step's line
  // When it becomes true (a SIGTERM handler sets it), the job agrees on a step to stop after
  // (Trainer::RequestStop); Fit saves a checkpoint there and returns. nullptr: never.
  const std::atomic<bool>* stop = nullptr;
  // --elastic: whether this worker leads the job now (the lowest live rank it has heard of);
  // only the lead asks the job to stop, the others leave (`leave`). Empty: always.
  std::function<bool()> leads;
  // --elastic: asked before each step (the job's step count); when true, this worker leaves
  // the job before that step: Fit settles the step in flight and returns with
  // FitResult::left. Empty: never.
  std::function<bool(int64_t step)> leave;
  FILE* log = stdout;
};

// A Speedometer window: batches (first, last] of `epoch` took `seconds`.
struct SpeedometerWindow {
  int epoch = 0;
  int64_t first_batch = 0, last_batch = 0;
  double seconds = 0;
  StepStats stats;  // the window's, figures kept on the GPUs included
  int64_t step = 0;  // the job's step count at the window's end
  double lr = 0;     // the learning rate of its last step
};

struct FitCallbacks {
  // Before a step reads its batch, and after it with the step's record (the trainer's time
  // split plus data wait, samples, loss and accuracy): the profiler's per-step records.
  std::function<void(int64_t step)> step_begins;
  std::function<void(const profile::StepRecord& record)> step_ends;
  // Every disp_batches batches of an epoch (MXNet's batch_end_callback, the Speedometer).
  std::function<void(const SpeedometerWindow& window)> speedometer;
  // Saves the trainer's state at (epoch, batch, step), as the checkpoint of `epoch`: after
  // every save_period-th and the last epoch, and where the job agreed to stop (inside an
  // epoch: batch > 0). Unset: nothing is saved.
  std::function<Status(int64_t epoch, int64_t batch, int64_t step)> checkpoint;
  // After each epoch and its validation: the epoch's training figures, the validation's
  // (nullptr without a validation set) and the job's step count then (the TensorBoard curves).
  std::function<void(int epoch, int64_t step, const StepStats& train, const StepStats* val)> epoch_ends;
  // After every batch: `done` of `total` batches of `epoch`, the epoch's speed and the run's
  // expected rest; and before Fit prints a line, so a live display can get out of the way.
  std::function<void(int epoch, int64_t done, int64_t total, double samples_per_sec, double eta_seconds)> progress;
  std::function<void()> before_print;
};

struct FitResult {
  bool stopped = false;  // the job agreed to stop (FitOptions::stop) before the last epoch's end
  bool left = false;     // this worker leaves the job (FitOptions::leave) before step `steps`
  int64_t steps = 0;     // the job's step count at the end (begin_step plus this run's steps)
  // When Fit fails: what it was doing, to print before the status, e.g.
  // "checkpoint after epoch 2: ". Empty otherwise.
  std::string failed_at;
};

// Trains from (begin_epoch, begin_batch) to the end of num_epochs epochs of `train`, and
// after every epoch evaluates `val` (nullptr: no validation). `train` must already be at
// the begin position. Returns the first failure of the data, a step, a checkpoint or the
// validation, with result->failed_at set.
Status Fit(Trainer* trainer, BatchSource* train, BatchSource* val, const FitOptions& options,
           const FitCallbacks& callbacks, FitResult* result);

// The Speedometer's line, MXNet's: "Epoch[E] Batch [F-L]\tSpeed: S samples/sec\taccuracy=...",
// then "\tskipped-steps=N" when steps were skipped, then `extra` as it is (`tally train`
// gives "\t" and the profiler's time split, which MXNet's log parsers do not read). No newline.
std::string SpeedometerLine(const SpeedometerWindow& window, int top_k, const std::string& extra);

// The epoch's metrics as MXNet's BaseModule.fit logs them, one line each, each ending in a
// newline: "Epoch[E] Train-accuracy=0.500000\nEpoch[E] Train-cross-entropy=...\n". One line
// per metric is what MXNet's log parsers read (tools/parse_log.py's regexes take the last
// "=" of a line).
std::string EpochMetricLines(int epoch, const char* prefix, const StepStats& stats, int top_k);

}  // namespace tally
