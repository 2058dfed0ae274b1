#include "worker/fit.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "profile/trace.h"

namespace tally {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// MXNet's metrics, each "name=value": accuracy[, top_k_accuracy_K], cross-entropy.
std::vector<std::string> MetricTerms(const StepStats& s, int top_k) {
  const double n = s.samples > 0 ? static_cast<double>(s.samples) : 1.0;
  char buf[64];
  std::vector<std::string> terms;
  std::snprintf(buf, sizeof buf, "accuracy=%f", s.correct / n);
  terms.push_back(buf);
  if (top_k > 1) {
    std::snprintf(buf, sizeof buf, "top_k_accuracy_%d=%f", top_k, s.topk_correct / n);
    terms.push_back(buf);
  }
  std::snprintf(buf, sizeof buf, "cross-entropy=%f", s.loss_sum / n);
  terms.push_back(buf);
  return terms;
}

// The one line a worker prints for a step skipped for a non-finite gradient.
std::string SkipLine(KVStoreType type, int epoch, int64_t batch, int64_t step, const SkippedStep& skip) {
  std::string who;
  for (int r : skip.workers) who += (who.empty() ? " from worker " : ", ") + std::to_string(r);
  const std::string what = "the gradient of key " + std::to_string(skip.key) + " was not finite" + who;
  char head[96];
  std::snprintf(head, sizeof head, "Epoch[%d] Batch [%lld]: step %lld ", epoch, static_cast<long long>(batch),
                static_cast<long long>(step));
  if (type == KVStoreType::kDistAsync) return head + ("not applied: " + what);
  return head + ("skipped, no weight changed: " + what);
}

// One Fit call's state: where the run is, and the figures of the epoch and the window.
class FitLoop {
 public:
  FitLoop(Trainer* trainer, BatchSource* train, BatchSource* val, const FitOptions& options,
          const FitCallbacks& callbacks, FitResult* result)
      : trainer_(trainer), train_(train), val_(val), o_(options), cb_(callbacks), result_(result),
        batches_(train->batches_per_epoch()), epoch_batches_(batches_), applied_lr_(options.initial_lr),
        step_(options.begin_step) {
    run_batches_ = (o_.num_epochs - o_.begin_epoch) * batches_ - o_.begin_batch;
  }

  Status Run() {
    run_start_ = Now();
    if (train_->elastic()) {
      TALLY_RETURN_IF_ERROR(RunElastic());
    } else {
      for (int epoch = static_cast<int>(o_.begin_epoch); epoch < o_.num_epochs; ++epoch) {
        TALLY_RETURN_IF_ERROR(RunEpoch(epoch));
        if (result_->stopped || result_->left) break;
      }
    }
    result_->steps = step_;
    return Status::Ok();
  }

 private:
  Status Fail(const std::string& what, const Status& s) {
    BeforePrint();
    result_->failed_at = what;
    return s;
  }

  void BeforePrint() {
    if (cb_.before_print) cb_.before_print();
  }

  Status RunEpoch(int epoch) {
    const int64_t first = epoch == o_.begin_epoch ? o_.begin_batch : 0;
    BeginEpoch(epoch, LearningRate(epoch * batches_ + first, o_.lr));
    for (int64_t b = first; b < batches_; ++b) {
      if (o_.leave && o_.leave(step_)) return Leave(epoch, b);
      TALLY_RETURN_IF_ERROR(RunBatch(epoch, b, epoch * batches_ + b));
      if (trainer_->StopAgreed()) return Stop(epoch, b);
    }
    return EndEpoch(epoch, batches_);
  }

  // --elastic: the source says at each step which epoch and batch it is, and an epoch ends
  // where the source's next step is in the next epoch (its length can change inside it).
  Status RunElastic() {
    int epoch = -1;
    int64_t b = o_.begin_batch - 1;  // the last batch run
    BatchSource::Place at;
    for (;;) {
      if (o_.leave && o_.leave(step_)) return Leave(epoch < 0 ? static_cast<int>(o_.begin_epoch) : epoch, b + 1);
      TALLY_RETURN_IF_ERROR(PlaceStep(epoch, b, &at));
      if (at.epoch != epoch) {
        if (epoch >= 0) TALLY_RETURN_IF_ERROR(EndEpoch(epoch, b + 1));
        if (at.epoch >= o_.num_epochs) return Status::Ok();
        epoch = static_cast<int>(at.epoch);
        BeginEpoch(epoch, LearningRate(at.lr_batch, o_.lr));
      }
      b = at.batch;
      epoch_batches_ = at.epoch_batches;
      run_batches_ = run_done_ + (at.epoch_batches - at.batch) + (o_.num_epochs - epoch - 1) * batches_;
      TALLY_RETURN_IF_ERROR(RunBatch(epoch, b, at.lr_batch));
      if (trainer_->StopAgreed()) return Stop(epoch, b);
    }
  }

  // Moves the elastic source to step_, settling the step in flight (batch b of `epoch`)
  // when it asks to.
  Status PlaceStep(int epoch, int64_t b, BatchSource::Place* at) {
    Status s = train_->PlaceStep(step_, [&] { return FinishInFlight(epoch, b + 1); }, at);
    if (!s.ok() && result_->failed_at.empty()) {
      return Fail("worker " + std::to_string(o_.rank) + ", data of step " + std::to_string(step_) + ": ", s);
    }
    return s;
  }

  void BeginEpoch(int epoch, double lr) {
    epoch_stats_ = window_ = StepStats();
    std::fprintf(o_.log, "Epoch[%d] lr=%f\n", epoch, lr);
    epoch_start_ = tic_ = Now();
  }

  // The epoch's lines, checkpoint and validation, after its last batch (`batches` of them).
  Status EndEpoch(int epoch, int64_t batches) {
    TALLY_RETURN_IF_ERROR(FinishInFlight(epoch, batches));
    BeforePrint();
    std::fputs(EpochMetricLines(epoch, "Train-", epoch_stats_, o_.top_k).c_str(), o_.log);
    std::fprintf(o_.log, "Epoch[%d] Time cost=%.3f\n", epoch, Now() - epoch_start_);
    std::fflush(o_.log);
    if (cb_.checkpoint && ((epoch + 1) % o_.save_period == 0 || epoch + 1 == o_.num_epochs)) {
      Status s = cb_.checkpoint(epoch + 1, 0, step_);
      if (!s.ok()) return Fail("checkpoint after epoch " + std::to_string(epoch) + ": ", s);
    }
    StepStats val;
    if (val_ != nullptr) TALLY_RETURN_IF_ERROR(Validate(epoch, &val));
    if (cb_.epoch_ends) cb_.epoch_ends(epoch, step_, epoch_stats_, val_ != nullptr ? &val : nullptr);
    std::fflush(o_.log);
    return Status::Ok();
  }

  // Batch b of `epoch`, at the schedule's position lr_batch.
  Status RunBatch(int epoch, int64_t b, int64_t lr_batch) {
    if (o_.stop != nullptr && o_.stop->load() && (!o_.leads || o_.leads())) trainer_->RequestStop();
    const float lr = static_cast<float>(LearningRate(lr_batch, o_.lr));
    if (lr != applied_lr_) {
      trainer_->SetLearningRate(lr);
      applied_lr_ = lr;
    }
    if (cb_.step_begins) cb_.step_begins(step_);
    const int64_t step_start = profile::NowUs();
    Status s = train_->Next(&images_, &labels_);
    const int64_t data_end = profile::NowUs();
    profile::Tracer::Get().Complete("data", "data", step_start, data_end - step_start);
    StepStats step_stats;
    if (s.ok()) s = trainer_->Step(images_, labels_, &step_stats);
    if (!s.ok()) {
      return Fail("worker " + std::to_string(o_.rank) + ", epoch " + std::to_string(epoch) + " batch " +
                      std::to_string(b) + ": ",
                  s);
    }
    PrintSkip(epoch, b + 1, step_);
    if (cb_.step_ends) cb_.step_ends(Record(epoch, b, step_start, data_end, step_stats));
    ++step_;
    ++run_done_;
    epoch_stats_.Add(step_stats);
    window_.Add(step_stats);
    return EndBatch(epoch, b);
  }

  // The skip the trainer's last Step or Finish found, if any: a step up to one behind the
  // step of batch `batch` (1-based), `step`, when the steps overlap (Trainer::Step).
  void PrintSkip(int epoch, int64_t batch, int64_t step) {
    if (trainer_->last_skip() == nullptr) return;
    const int64_t skipped = trainer_->last_skip_step();
    BeforePrint();
    std::fprintf(o_.log, "%s\n", SkipLine(o_.kv_store, epoch, batch - (step - skipped), skipped, *trainer_->last_skip()).c_str());
    std::fflush(o_.log);
  }

  // Settles the step the trainer left in flight, whose batch `batch` (1-based) ended the run
  // so far, before the weights are read (epoch end, checkpoint, stop).
  Status FinishInFlight(int epoch, int64_t batch) {
    if (!trainer_->in_flight()) return Status::Ok();
    StepStats settled;
    Status s = trainer_->Finish(&settled);
    if (!s.ok()) return Fail("worker " + std::to_string(o_.rank) + ", epoch " + std::to_string(epoch) + " batch " +
                                 std::to_string(batch - 1) + ": ", s);
    PrintSkip(epoch, batch, step_ - 1);
    epoch_stats_.Add(settled);
    window_.Add(settled);
    return Status::Ok();
  }

  profile::StepRecord Record(int epoch, int64_t b, int64_t step_start, int64_t data_end, const StepStats& stats) {
    profile::StepRecord record = trainer_->last_step();
    record.step = step_;
    record.epoch = epoch;
    record.batch = b;
    record.start_us = step_start;
    record.dur_us = profile::NowUs() - step_start;
    record.phase(profile::Phase::kData) = data_end - step_start;
    record.samples = stats.samples;
    record.has_metrics = !trainer_->stats_on_device();
    record.loss = stats.loss_sum / std::max<int64_t>(1, stats.samples);
    record.accuracy = static_cast<double>(stats.correct) / std::max<int64_t>(1, stats.samples);
    return record;
  }

  // The Speedometer and the progress display, after batch b's step.
  Status EndBatch(int epoch, int64_t b) {
    const bool display = (b + 1) % o_.disp_batches == 0;
    if (display || b + 1 == epoch_batches_) {
      // A window's figures include its last step's skip, which overlap leaves for the next
      // step to find: that step is settled now (one step in disp_batches without overlap).
      TALLY_RETURN_IF_ERROR(FinishInFlight(epoch, b + 1));
      // GPU steps keep their loss and accuracy on the device: one wait brings the window's.
      StepStats on_device;
      trainer_->ReadStats(&on_device);
      epoch_stats_.Add(on_device);
      window_.Add(on_device);
    }
    const double now = Now();
    if (display) {
      BeforePrint();
      if (cb_.speedometer) {
        SpeedometerWindow w;
        w.epoch = epoch;
        w.first_batch = b + 1 - o_.disp_batches;
        w.last_batch = b + 1;
        w.seconds = now - tic_;
        w.stats = window_;
        w.step = step_;
        w.lr = applied_lr_;
        cb_.speedometer(w);
      }
      window_ = StepStats();
      tic_ = now;
    }
    if (cb_.progress) {
      const double per_batch = (now - run_start_) / static_cast<double>(run_done_);
      cb_.progress(epoch, b + 1, epoch_batches_, static_cast<double>(epoch_stats_.samples) / (now - epoch_start_),
                   per_batch * static_cast<double>(run_batches_ - run_done_));
    }
    return Status::Ok();
  }

  // The job agreed to stop after batch b: the checkpoint there (the next epoch's start when
  // b ended the epoch), and the run ends.
  Status Stop(int epoch, int64_t b) {
    BeforePrint();
    bool epoch_done = b + 1 == epoch_batches_;
    std::fprintf(o_.log, "Epoch[%d] Batch [%ld]: stopping, the job was asked to (SIGTERM)\n", epoch,
                 static_cast<long>(b + 1));
    std::fflush(o_.log);
    TALLY_RETURN_IF_ERROR(FinishInFlight(epoch, b + 1));
    if (train_->elastic()) {  // whether the epoch ends here is known once the next step is placed
      BatchSource::Place next;
      TALLY_RETURN_IF_ERROR(PlaceStep(epoch, b, &next));
      epoch_done = next.epoch != epoch;
    }
    result_->stopped = true;
    result_->steps = step_;
    if (!cb_.checkpoint) return Status::Ok();
    Status s = cb_.checkpoint(epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : b + 1, step_);
    return s.ok() ? s : Fail("checkpoint on SIGTERM: ", s);
  }

  // This worker leaves before batch b of `epoch` (--elastic): every step it pushed is
  // settled first, so that each counts its push on every server.
  Status Leave(int epoch, int64_t b) {
    TALLY_RETURN_IF_ERROR(FinishInFlight(epoch, b));
    BeforePrint();
    std::fprintf(o_.log, "Epoch[%d] Batch [%ld]: worker %d leaves the job before step %ld (--elastic)\n", epoch,
                 static_cast<long>(b), o_.rank, static_cast<long>(step_));
    std::fflush(o_.log);
    result_->left = true;
    result_->steps = step_;
    return Status::Ok();
  }

  Status Validate(int epoch, StepStats* val) {
    Status s;
    for (int64_t b = 0; b < val_->batches_per_epoch() && s.ok(); ++b) {
      s = val_->Next(&images_, &labels_);
      if (s.ok()) s = trainer_->Evaluate(images_, labels_, val);
    }
    if (!s.ok()) return Fail("validation after epoch " + std::to_string(epoch) + ": ", s);
    std::fputs(EpochMetricLines(epoch, "Validation-", *val, o_.top_k).c_str(), o_.log);
    return Status::Ok();
  }

  Trainer* const trainer_;
  BatchSource* const train_;
  BatchSource* const val_;
  const FitOptions& o_;
  const FitCallbacks& cb_;
  FitResult* const result_;
  const int64_t batches_;        // of an epoch: the source's, the lr schedule's
  int64_t epoch_batches_;        // of the epoch in progress (elastic: as far as known now)
  float applied_lr_;
  int64_t step_;
  int64_t run_batches_ = 0, run_done_ = 0;
  double run_start_ = 0, epoch_start_ = 0, tic_ = 0;
  StepStats epoch_stats_, window_;
  Tensor images_, labels_;
};

}  // namespace

Status Fit(Trainer* trainer, BatchSource* train, BatchSource* val, const FitOptions& options,
           const FitCallbacks& callbacks, FitResult* result) {
  *result = FitResult();
  return FitLoop(trainer, train, val, options, callbacks, result).Run();
}

std::string SpeedometerLine(const SpeedometerWindow& w, int top_k, const std::string& extra) {
  std::string tail = extra;
  if (w.stats.skipped_steps > 0) tail = "\tskipped-steps=" + std::to_string(w.stats.skipped_steps) + tail;
  char head[128];
  std::snprintf(head, sizeof head, "Epoch[%d] Batch [%ld-%ld]\tSpeed: %.2f samples/sec\t", w.epoch,
                static_cast<long>(w.first_batch), static_cast<long>(w.last_batch), w.stats.samples / w.seconds);
  std::string line = head;
  const std::vector<std::string> terms = MetricTerms(w.stats, top_k);
  for (size_t i = 0; i < terms.size(); ++i) line += (i > 0 ? "\t" : "") + terms[i];
  return line + tail;
}

std::string EpochMetricLines(int epoch, const char* prefix, const StepStats& s, int top_k) {
  std::string out;
  for (const std::string& term : MetricTerms(s, top_k)) {
    out += "Epoch[" + std::to_string(epoch) + "] " + prefix + term + "\n";
  }
  return out;
}

}  // namespace tally
