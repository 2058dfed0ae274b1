// FitBoard: a worker's TensorBoard curves (`tally train --tensorboard DIR`), fed by Fit's
// callbacks (worker/fit.h) into one event file (tensorboard/event_writer.h).
//
//   std::unique_ptr<tensorboard::EventWriter> writer;
//   TALLY_RETURN_IF_ERROR(tensorboard::EventWriter::Open(dir + "/worker-0", &writer));
//   FitBoard board(std::move(writer), [&] { return trainer->loss_scaler().scale(); }, options.top_k);
//   FitCallbacks callbacks = ...;  // the run's own
//   board.Attach(&callbacks);      // keeps them: each is called first, then the board's
//   Fit(trainer.get(), train, val, options, callbacks, &result);  // board outlives Fit
//
// Each Speedometer window writes, at the job's step count at its end: train/loss (mean
// cross-entropy), train/accuracy (and train/top_k_accuracy when top_k > 1),
// train/learning_rate, train/samples_per_sec (this worker's), train/skipped_steps (in the
// window), train/loss_scale, and from the steps' time split time/data_wait_share,
// time/comm_share (push, pull, wait and update over wall time, as the Speedometer's "comm"
// of --profile) and time/step_ms. Each epoch writes, at the job's step count after it,
// epoch/train_loss, epoch/train_accuracy and, with a validation set, epoch/val_loss and
// epoch/val_accuracy (top-k ones too). docs/tensorboard.md lists them.
//
// Writing never stops training: the first failure (a full disk) is printed on stderr,
// naming the file and byte, and the board writes nothing more. Driven by Fit's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "profile/records.h"
#include "tensorboard/event_writer.h"
#include "worker/fit.h"

namespace tally {

class FitBoard {
 public:
  // loss_scale: the trainer's loss scale now, read after each window.
  FitBoard(std::unique_ptr<tensorboard::EventWriter> writer, std::function<double()> loss_scale, int top_k);

  // Wraps callbacks' step_ends, speedometer and epoch_ends so that they call the board after
  // the run's own (unset ones: the board alone).
  void Attach(FitCallbacks* callbacks);

  void AddStep(const profile::StepRecord& record);
  void AddWindow(const SpeedometerWindow& window);
  void AddEpoch(int epoch, int64_t step, const StepStats& train, const StepStats* val);
  const std::string& path() const { return writer_->path(); }

 private:
  // Mean loss, accuracy and top-k accuracy of `stats` under `prefix` ("train/", "epoch/val_").
  void AddMetrics(const std::string& prefix, const StepStats& stats, std::vector<tensorboard::Scalar>* out) const;
  void Write(int64_t step, const std::vector<tensorboard::Scalar>& scalars);

  std::unique_ptr<tensorboard::EventWriter> writer_;
  const std::function<double()> loss_scale_;
  const int top_k_;
  bool failed_ = false;
  // The time split of the steps since the last window (µs).
  int64_t data_us_ = 0, comm_us_ = 0, wall_us_ = 0, steps_ = 0;
};

}  // namespace tally
