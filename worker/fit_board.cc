#include "worker/fit_board.h"

#include <cstdio>
#include <utility>

namespace tally {

FitBoard::FitBoard(std::unique_ptr<tensorboard::EventWriter> writer, std::function<double()> loss_scale, int top_k)
    : writer_(std::move(writer)), loss_scale_(std::move(loss_scale)), top_k_(top_k) {}

void FitBoard::Attach(FitCallbacks* cb) {
  auto step_ends = std::move(cb->step_ends);
  cb->step_ends = [this, step_ends](const profile::StepRecord& r) {
    if (step_ends) step_ends(r);
    AddStep(r);
  };
  auto speedometer = std::move(cb->speedometer);
  cb->speedometer = [this, speedometer](const SpeedometerWindow& w) {
    if (speedometer) speedometer(w);
    AddWindow(w);
  };
  auto epoch_ends = std::move(cb->epoch_ends);
  cb->epoch_ends = [this, epoch_ends](int epoch, int64_t step, const StepStats& train, const StepStats* val) {
    if (epoch_ends) epoch_ends(epoch, step, train, val);
    AddEpoch(epoch, step, train, val);
  };
}

void FitBoard::AddStep(const profile::StepRecord& r) {
  using profile::Phase;
  data_us_ += r.phase(Phase::kData);
  comm_us_ += r.phase(Phase::kPush) + r.phase(Phase::kPull) + r.phase(Phase::kWait) + r.phase(Phase::kUpdate);
  wall_us_ += r.dur_us;
  ++steps_;
}

void FitBoard::AddMetrics(const std::string& prefix, const StepStats& s,
                          std::vector<tensorboard::Scalar>* out) const {
  if (s.samples <= 0) return;
  const double n = static_cast<double>(s.samples);
  out->push_back({prefix + "loss", s.loss_sum / n});
  out->push_back({prefix + "accuracy", s.correct / n});
  if (top_k_ > 1) out->push_back({prefix + "top_k_accuracy", s.topk_correct / n});
}

void FitBoard::AddWindow(const SpeedometerWindow& w) {
  std::vector<tensorboard::Scalar> scalars;
  AddMetrics("train/", w.stats, &scalars);
  scalars.push_back({"train/learning_rate", w.lr});
  if (w.seconds > 0) scalars.push_back({"train/samples_per_sec", w.stats.samples / w.seconds});
  scalars.push_back({"train/skipped_steps", static_cast<double>(w.stats.skipped_steps)});
  scalars.push_back({"train/loss_scale", loss_scale_()});
  if (wall_us_ > 0) {
    const double wall = static_cast<double>(wall_us_);
    scalars.push_back({"time/data_wait_share", data_us_ / wall});
    scalars.push_back({"time/comm_share", comm_us_ / wall});
    scalars.push_back({"time/step_ms", wall / 1000.0 / static_cast<double>(steps_)});
  }
  data_us_ = comm_us_ = wall_us_ = steps_ = 0;
  Write(w.step, scalars);
}

void FitBoard::AddEpoch(int epoch, int64_t step, const StepStats& train, const StepStats* val) {
  std::vector<tensorboard::Scalar> scalars;
  AddMetrics("epoch/train_", train, &scalars);
  if (val != nullptr) AddMetrics("epoch/val_", *val, &scalars);
  // An epoch's last steps after its last full window belong to no window.
  data_us_ = comm_us_ = wall_us_ = steps_ = 0;
  Write(step, scalars);
}

void FitBoard::Write(int64_t step, const std::vector<tensorboard::Scalar>& scalars) {
  if (failed_ || scalars.empty()) return;
  Status s = writer_->AddScalars(step, scalars);
  if (s.ok()) s = writer_->Flush();  // a window apart: TensorBoard shows each as it comes
  if (!s.ok()) {
    failed_ = true;
    std::fprintf(stderr, "tally train: --tensorboard: %s; no more curves are written, training goes on\n",
                 s.ToString().c_str());
  }
}

}  // namespace tally
