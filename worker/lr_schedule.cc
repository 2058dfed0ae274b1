#include "worker/lr_schedule.h"

#include <cmath>
#include <cstdlib>

namespace tally {

Status ValidateLrSchedule(const LrScheduleConfig& c) {
  if (c.scheduler != "step" && c.scheduler != "poly" && c.scheduler != "cosine") {
    return Status::InvalidArgument("--lr-scheduler " + c.scheduler + ": expected step, poly or cosine");
  }
  if (c.warmup_strategy != "linear" && c.warmup_strategy != "constant") {
    return Status::InvalidArgument("--warmup-strategy " + c.warmup_strategy + ": expected linear or constant");
  }
  if (!(c.base_lr >= 0)) return Status::InvalidArgument("--lr must not be negative");
  if (!(c.factor > 0)) return Status::InvalidArgument("--lr-factor must be positive");
  if (c.num_epochs < 1) return Status::InvalidArgument("--num-epochs must be positive");
  if (c.begin_epoch < 0) return Status::InvalidArgument("--load-epoch must not be negative");
  if (c.batches_per_epoch < 1) {
    return Status::InvalidArgument("an epoch has no batch: --num-examples is smaller than --batch-size");
  }
  if (c.warmup_epochs < 0) return Status::InvalidArgument("--warmup-epochs must not be negative");
  if (c.warmup_steps < 0) return Status::InvalidArgument("--warmup-steps must not be negative");
  // poly and cosine decay over the updates after warm-up; there must be some.
  if (c.scheduler != "step" && WarmupUpdates(c) >= c.num_epochs * c.batches_per_epoch) {
    return Status::InvalidArgument(std::string(c.warmup_steps > 0 ? "--warmup-steps" : "--warmup-epochs") +
                                   " must leave updates before the end of --num-epochs with --lr-scheduler " +
                                   c.scheduler);
  }
  if (!(c.pwr > 0)) return Status::InvalidArgument("--lr-poly-power must be positive");
  if (!(c.final_lr >= 0 && c.final_lr <= c.base_lr)) {
    return Status::InvalidArgument("--final-lr must be in [0, --lr]");
  }
  if (!(c.warmup_begin_lr >= 0 && c.warmup_begin_lr <= c.base_lr)) {
    return Status::InvalidArgument("--warmup-strategy " + c.warmup_strategy +
                                   ": the warm-up learning rate must be in [0, --lr]");
  }
  for (size_t i = 0; i < c.step_epochs.size(); ++i) {
    if (c.step_epochs[i] < 1) return Status::InvalidArgument("--lr-step-epochs must be positive epochs");
    if (i > 0 && c.step_epochs[i] <= c.step_epochs[i - 1]) {
      return Status::InvalidArgument("--lr-step-epochs must be increasing");
    }
  }
  return Status::Ok();
}

int64_t WarmupUpdates(const LrScheduleConfig& c) {
  return c.warmup_steps > 0 ? c.warmup_steps : c.warmup_epochs * c.batches_per_epoch;
}

double LearningRate(int64_t step, const LrScheduleConfig& c) {
  const int64_t b = c.batches_per_epoch;
  const int64_t n = c.begin_epoch * b + step + 1;
  const int64_t warmup = WarmupUpdates(c);
  if (n < warmup) {
    if (c.warmup_strategy == "constant") return c.warmup_begin_lr;
    return c.warmup_begin_lr + (c.base_lr - c.warmup_begin_lr) * static_cast<double>(n) / static_cast<double>(warmup);
  }
  if (c.scheduler == "step") {
    double lr = c.base_lr;
    for (int s : c.step_epochs) {
      if (n > s * b) lr *= c.factor;
    }
    return lr;
  }
  const int64_t total = c.num_epochs * b;
  // MXNet keeps the last lr it computed, which at n = N is final_lr.
  if (n > total) return c.final_lr;
  const double t = static_cast<double>(n - warmup) / static_cast<double>(total - warmup);
  const double span = c.base_lr - c.final_lr;
  if (c.scheduler == "poly") return c.final_lr + span * std::pow(1 - t, c.pwr);
  return c.final_lr + span * (1 + std::cos(M_PI * t)) / 2;
}

Status ParseLrStepEpochs(const std::string& text, std::vector<int>* epochs) {
  epochs->clear();
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < -1000000 || v > 1000000) {
      return Status::InvalidArgument("--lr-step-epochs " + text + ": expected epochs such as 30,60");
    }
    epochs->push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
    if (start == text.size()) {
      return Status::InvalidArgument("--lr-step-epochs " + text + ": expected epochs such as 30,60");
    }
  }
  return Status::Ok();
}

Status BatchScaledLr(double lr, int64_t global_batch, int lr_batch_scale, double* scaled) {
  if (lr_batch_scale < 0) return Status::InvalidArgument("--lr-batch-scale must not be negative (0: off)");
  *scaled = lr_batch_scale == 0 ? lr : lr * static_cast<double>(global_batch) / lr_batch_scale;
  return Status::Ok();
}

}  // namespace tally
