// Fit (worker/fit.h) driven directly: a small CPU ResNet through the local kvstore, fed by
// a synthetic source, with every callback recorded.
#include "worker/fit.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "ops/random.h"

namespace tally {
namespace {

constexpr int kBatch = 4;
constexpr int kClasses = 4;

// Random images and labels from a seed; fails at call `fail_at` when that is set.
class TestSource : public BatchSource {
 public:
  TestSource(int64_t batches, uint64_t seed) : batches_(batches), rng_(seed) {}
  Status Next(Tensor* images, Tensor* labels) override {
    if (calls_++ == fail_at) return Status::IoError("test source: batch " + std::to_string(fail_at));
    *images = Tensor::Empty({kBatch, 8, 8, 3}, DType::kF32);
    *labels = Tensor::Empty({kBatch}, DType::kI32);
    float* x = images->data<float>();
    for (int64_t i = 0; i < images->numel(); ++i) x[i] = rng_.Uniform() - 0.5f;
    for (int b = 0; b < kBatch; ++b) labels->data<int32_t>()[b] = static_cast<int32_t>(rng_.Next() % kClasses);
    return Status::Ok();
  }
  int64_t batches_per_epoch() const override { return batches_; }

  int64_t calls_ = 0;
  int64_t fail_at = -1;

 private:
  int64_t batches_;
  Rng rng_;
};

TrainerConfig SmallConfig() {
  TrainerConfig cfg;
  cfg.model.num_layers = 8;  // CIFAR-style, one block per stage
  cfg.model.num_classes = kClasses;
  cfg.model.image_shape = {3, 8, 8};
  cfg.model.seed = 7;
  // Running statistics in BN and no momentum: an update with lr 0 changes no parameter.
  cfg.model.bn_use_global_stats = true;
  cfg.kv_store = KVStoreType::kLocal;
  cfg.optimizer.lr = 0.05f;
  cfg.optimizer.momentum = 0.0f;
  cfg.optimizer.wd = 0.0f;
  cfg.top_k = 0;
  return cfg;
}

std::unique_ptr<Trainer> MakeTrainer() {
  std::unique_ptr<Trainer> t;
  Status s = Trainer::Create(SmallConfig(), &t);
  EXPECT_TRUE(s.ok()) << s;
  return t;
}

FitOptions Options(int epochs, int64_t batches) {
  FitOptions o;
  o.num_epochs = epochs;
  o.disp_batches = 2;
  o.save_period = 2;
  o.lr.base_lr = 0.05;
  o.lr.batches_per_epoch = batches;
  o.lr.num_epochs = epochs;
  o.lr.scheduler = "step";
  o.lr.factor = 0.5;
  o.lr.step_epochs = {1};
  o.initial_lr = 0.05f;
  o.kv_store = KVStoreType::kLocal;
  return o;
}

// Everything the callbacks saw, and the log Fit wrote.
struct Recorded {
  std::vector<int64_t> begun;  // step_begins' steps
  std::vector<profile::StepRecord> records;
  std::vector<SpeedometerWindow> windows;
  std::vector<std::tuple<int64_t, int64_t, int64_t>> checkpoints;  // epoch, batch, step
  int progress = 0, before_print = 0;
  FILE* log = std::tmpfile();
  ~Recorded() { std::fclose(log); }

  FitCallbacks Callbacks() {
    FitCallbacks cb;
    cb.step_begins = [this](int64_t step) { begun.push_back(step); };
    cb.step_ends = [this](const profile::StepRecord& r) { records.push_back(r); };
    cb.speedometer = [this](const SpeedometerWindow& w) { windows.push_back(w); };
    cb.checkpoint = [this](int64_t epoch, int64_t batch, int64_t step) {
      checkpoints.emplace_back(epoch, batch, step);
      return Status::Ok();
    };
    cb.progress = [this](int, int64_t, int64_t, double, double) { ++progress; };
    cb.before_print = [this] { ++before_print; };
    return cb;
  }

  std::string Text() {
    std::fflush(log);
    std::rewind(log);
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, log)) > 0) text.append(buf, n);
    return text;
  }
};

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Fit, CallsTheSpeedometerCheckpointsAndProfilerAtTheirCadence) {
  auto trainer = MakeTrainer();
  TestSource train(5, 1), val(2, 2);
  Recorded rec;
  FitOptions options = Options(3, 5);
  options.log = rec.log;
  FitResult result;
  Status s = Fit(trainer.get(), &train, &val, options, rec.Callbacks(), &result);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(result.steps, 15);
  EXPECT_EQ(train.calls_, 15);
  EXPECT_EQ(val.calls_, 3 * 2);  // the whole validation set after every epoch

  ASSERT_EQ(rec.begun.size(), 15u);
  ASSERT_EQ(rec.records.size(), 15u);
  for (int64_t i = 0; i < 15; ++i) {
    EXPECT_EQ(rec.begun[i], i);
    EXPECT_EQ(rec.records[i].step, i);
    EXPECT_EQ(rec.records[i].epoch, i / 5);
    EXPECT_EQ(rec.records[i].batch, i % 5);
    EXPECT_EQ(rec.records[i].samples, kBatch);
  }
  // Every 2 batches of 5: windows (0-2] and (2-4] of each epoch; batch 5 starts none.
  ASSERT_EQ(rec.windows.size(), 6u);
  for (size_t i = 0; i < rec.windows.size(); ++i) {
    EXPECT_EQ(rec.windows[i].epoch, static_cast<int>(i / 2));
    EXPECT_EQ(rec.windows[i].first_batch, i % 2 == 0 ? 0 : 2);
    EXPECT_EQ(rec.windows[i].last_batch, i % 2 == 0 ? 2 : 4);
    EXPECT_EQ(rec.windows[i].stats.samples, 2 * kBatch);
    EXPECT_GT(rec.windows[i].stats.loss_sum, 0);
  }
  // save_period 2 of 3 epochs: after the second and after the last.
  using C = std::tuple<int64_t, int64_t, int64_t>;
  EXPECT_EQ(rec.checkpoints, (std::vector<C>{C{2, 0, 10}, C{3, 0, 15}}));
  EXPECT_EQ(rec.progress, 15);
  EXPECT_GE(rec.before_print, 6 + 3);  // before every Speedometer line and every epoch's end

  const std::string log = rec.Text();
  for (const char* line : {"Epoch[0] lr=0.050000\n", "Epoch[1] lr=0.025000\n", "Epoch[2] lr=0.025000\n"}) {
    EXPECT_EQ(Count(log, line), 1) << line << " in\n" << log;
  }
  EXPECT_EQ(Count(log, "] Train-accuracy="), 3) << log;
  EXPECT_EQ(Count(log, "] Time cost="), 3) << log;
  EXPECT_EQ(Count(log, "] Validation-accuracy="), 3) << log;
  EXPECT_EQ(Count(log, "] Train-cross-entropy="), 3) << log;
  EXPECT_LT(log.find("Epoch[0] Train-"), log.find("Epoch[0] Validation-"));
  EXPECT_LT(log.find("Epoch[0] Validation-"), log.find("Epoch[1] lr="));
}

// What the TensorBoard curves are drawn from: each window's step and lr, each epoch's end.
TEST(Fit, TellsEachWindowsStepAndLrAndEachEpochsEnd) {
  auto trainer = MakeTrainer();
  TestSource train(5, 1), val(2, 2);
  Recorded rec;
  FitOptions options = Options(2, 5);
  options.log = rec.log;
  FitCallbacks cb = rec.Callbacks();
  std::vector<std::tuple<int, int64_t, int64_t, int64_t>> ends;  // epoch, step, train and val samples
  cb.epoch_ends = [&](int epoch, int64_t step, const StepStats& t, const StepStats* v) {
    ends.emplace_back(epoch, step, t.samples, v != nullptr ? v->samples : -1);
  };
  FitResult result;
  ASSERT_TRUE(Fit(trainer.get(), &train, &val, options, cb, &result).ok());
  using E = std::tuple<int, int64_t, int64_t, int64_t>;
  EXPECT_EQ(ends, (std::vector<E>{E{0, 5, 5 * kBatch, 2 * kBatch}, E{1, 10, 5 * kBatch, 2 * kBatch}}));
  ASSERT_EQ(rec.windows.size(), 4u);
  for (const SpeedometerWindow& w : rec.windows) {
    EXPECT_EQ(w.step, w.epoch * 5 + w.last_batch);
    EXPECT_FLOAT_EQ(w.lr, w.epoch == 0 ? 0.05 : 0.025);  // the step schedule's factor at epoch 1
  }
}

std::vector<std::vector<float>> Weights(Trainer* t) {
  std::vector<std::vector<float>> out;
  for (const auto* p : t->replica(0).Parameters()) {
    const float* v = p->value.data<float>();
    out.emplace_back(v, v + p->value.numel());
  }
  return out;
}

// Poly's last update has lr 0 (lr_schedule.h): if Fit applies the schedule, that step
// changes no weight while the one before it does.
TEST(Fit, AppliesTheLearningRateSchedule) {
  auto trainer = MakeTrainer();
  TestSource train(3, 3);
  FitOptions options = Options(2, 3);
  options.lr.scheduler = "poly";
  options.lr.step_epochs.clear();
  Recorded rec;
  options.log = rec.log;
  FitCallbacks cb = rec.Callbacks();
  std::vector<std::vector<std::vector<float>>> after;  // weights after each step
  cb.step_ends = [&](const profile::StepRecord&) { after.push_back(Weights(trainer.get())); };
  FitResult result;
  ASSERT_TRUE(Fit(trainer.get(), &train, nullptr, options, cb, &result).ok());
  ASSERT_EQ(after.size(), 6u);
  EXPECT_NE(after[3], after[4]);  // lr > 0
  EXPECT_EQ(after[4], after[5]);  // lr 0
  char line[64];
  std::snprintf(line, sizeof line, "Epoch[1] lr=%f\n", LearningRate(3, options.lr));
  EXPECT_EQ(Count(rec.Text(), line), 1) << rec.Text();
  EXPECT_LT(LearningRate(3, options.lr), 0.05 * 0.9);
}

// The SIGTERM path: once stop is set the job stops after the next step, saving there.
TEST(Fit, StopsWhenAskedAndSavesWhereItStopped) {
  auto trainer = MakeTrainer();
  TestSource train(5, 4);
  std::atomic<bool> stop{false};
  Recorded rec;
  FitOptions options = Options(3, 5);
  options.save_period = 1;
  options.stop = &stop;
  options.log = rec.log;
  FitCallbacks cb = rec.Callbacks();
  cb.step_ends = [&](const profile::StepRecord& r) {
    rec.records.push_back(r);
    if (r.step == 6) stop = true;  // as the SIGTERM handler would, during step 6
  };
  FitResult result;
  Status s = Fit(trainer.get(), &train, nullptr, options, cb, &result);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(result.steps, 8);  // step 7, the one that asked, is the last
  EXPECT_EQ(rec.records.size(), 8u);
  using C = std::tuple<int64_t, int64_t, int64_t>;
  // After epoch 0, then inside epoch 1 after its 3rd batch.
  EXPECT_EQ(rec.checkpoints, (std::vector<C>{C{1, 0, 5}, C{1, 3, 8}}));
  const std::string log = rec.Text();
  EXPECT_EQ(Count(log, "Epoch[1] Batch [3]: stopping, the job was asked to (SIGTERM)\n"), 1) << log;
  EXPECT_EQ(Count(log, "Epoch[1] Train-"), 0) << log;
  EXPECT_EQ(Count(log, "Epoch[2]"), 0) << log;
}

// A stop agreed on an epoch's last batch saves as the next epoch's start.
TEST(Fit, AStopAtAnEpochsEndSavesTheNextEpochsStart) {
  auto trainer = MakeTrainer();
  TestSource train(5, 5);
  std::atomic<bool> stop{false};
  Recorded rec;
  FitOptions options = Options(3, 5);
  options.save_period = 10;
  options.stop = &stop;
  options.log = rec.log;
  FitCallbacks cb = rec.Callbacks();
  cb.step_begins = [&](int64_t step) {
    if (step == 3) stop = true;  // seen before step 4, the epoch's last
  };
  FitResult result;
  ASSERT_TRUE(Fit(trainer.get(), &train, nullptr, options, cb, &result).ok());
  EXPECT_TRUE(result.stopped);
  using C = std::tuple<int64_t, int64_t, int64_t>;
  EXPECT_EQ(rec.checkpoints, (std::vector<C>{C{1, 0, 5}}));
}

TEST(Fit, ResumesAtItsBeginPosition) {
  auto trainer = MakeTrainer();
  TestSource train(5, 6);
  Recorded rec;
  FitOptions options = Options(3, 5);
  options.begin_epoch = 1;
  options.begin_batch = 3;
  options.begin_step = 8;
  options.log = rec.log;
  FitResult result;
  ASSERT_TRUE(Fit(trainer.get(), &train, nullptr, options, rec.Callbacks(), &result).ok());
  ASSERT_EQ(rec.begun.size(), 7u);  // batches 3 and 4 of epoch 1, then epoch 2
  EXPECT_EQ(rec.begun.front(), 8);
  EXPECT_EQ(result.steps, 15);
  const std::string log = rec.Text();
  EXPECT_EQ(log.rfind("Epoch[1] lr=", 0), 0u) << log;
  EXPECT_EQ(Count(log, "Epoch[0]"), 0) << log;
  // Epoch 1's windows are counted from the epoch's batches: (2-4] ends at batch 4.
  ASSERT_FALSE(rec.windows.empty());
  EXPECT_EQ(rec.windows[0].epoch, 1);
  EXPECT_EQ(rec.windows[0].last_batch, 4);
}

// --elastic's source (BatchSource::PlaceStep): epoch 0 is believed 6 batches long until its
// step 6, where a leave's re-cut makes it 8; later epochs have 6. It asks for the step in
// flight to be settled where it was believed to end.
class ElasticTestSource : public TestSource {
 public:
  ElasticTestSource() : TestSource(6, 9) {}
  bool elastic() const override { return true; }
  Status PlaceStep(int64_t step, const std::function<Status()>& settle, Place* out) override {
    EXPECT_EQ(step, next_++);
    out->epoch = step < 8 ? 0 : 1 + (step - 8) / 6;
    out->batch = step < 8 ? step : (step - 8) % 6;
    out->epoch_batches = step < 6 ? 6 : step < 8 ? 8 : 6;
    out->lr_batch = out->epoch * 6 + std::min<int64_t>(5, out->batch * 6 / out->epoch_batches);
    if ((out->batch == 0 && step > 0) || step == 6) {
      ++settles;
      TALLY_RETURN_IF_ERROR(settle());
    }
    places.push_back(*out);
    return Status::Ok();
  }
  int settles = 0;
  std::vector<Place> places;

 private:
  int64_t next_ = 0;
};

TEST(Fit, AnElasticSourceSaysWhereEachEpochEndsAndItsLengthMayChangeInside) {
  auto trainer = MakeTrainer();
  ElasticTestSource train;
  Recorded rec;
  FitOptions options = Options(2, 6);
  options.save_period = 1;
  options.log = rec.log;
  FitResult result;
  ASSERT_TRUE(Fit(trainer.get(), &train, nullptr, options, rec.Callbacks(), &result).ok());
  EXPECT_EQ(result.steps, 14);
  EXPECT_EQ(train.settles, 3);  // at steps 6, 8 and 14
  using C = std::tuple<int64_t, int64_t, int64_t>;
  EXPECT_EQ(rec.checkpoints, (std::vector<C>{C{1, 0, 8}, C{2, 0, 14}}));
  std::vector<std::pair<int, int64_t>> windows;
  for (const SpeedometerWindow& w : rec.windows) windows.emplace_back(w.epoch, w.last_batch);
  EXPECT_EQ(windows, (std::vector<std::pair<int, int64_t>>{{0, 2}, {0, 4}, {0, 6}, {0, 8}, {1, 2}, {1, 4}, {1, 6}}));
  ASSERT_EQ(rec.records.size(), 14u);
  EXPECT_EQ(rec.records[7].epoch, 0);
  EXPECT_EQ(rec.records[7].batch, 7);
  EXPECT_EQ(rec.records[8].epoch, 1);
  EXPECT_EQ(rec.records[8].batch, 0);
  const std::string log = rec.Text();
  EXPECT_EQ(Count(log, "Epoch[0] Train-accuracy="), 1) << log;
  EXPECT_EQ(Count(log, "Epoch[1] Train-accuracy="), 1) << log;
  EXPECT_EQ(Count(log, "Epoch[1] lr=0.025000"), 1) << log;  // the step schedule's drop at epoch 1
  EXPECT_EQ(Count(log, "Epoch[2]"), 0) << log;
}

TEST(Fit, AnElasticStopOnTheBatchBelievedLastSavesWhereTheSourceSaysTheNextStepIs) {
  // The stop agreed after step 5, epoch 0's last batch as believed then: the re-cut at step 6
  // makes the epoch 8 batches long, so the checkpoint is inside epoch 0, at its batch 6.
  auto trainer = MakeTrainer();
  ElasticTestSource train;
  std::atomic<bool> stop{false};
  Recorded rec;
  FitOptions options = Options(2, 6);
  options.stop = &stop;
  options.log = rec.log;
  FitCallbacks cb = rec.Callbacks();
  cb.step_ends = [&](const profile::StepRecord& r) {
    if (r.step == 4) stop = true;
  };
  FitResult result;
  ASSERT_TRUE(Fit(trainer.get(), &train, nullptr, options, cb, &result).ok());
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(result.steps, 6);
  using C = std::tuple<int64_t, int64_t, int64_t>;
  EXPECT_EQ(rec.checkpoints, (std::vector<C>{C{0, 6, 6}}));
  ASSERT_EQ(train.places.size(), 7u);  // the stop placed step 6 to know
  EXPECT_EQ(train.places.back().epoch, 0);
}

TEST(Fit, SaysWhereItFailed) {
  auto trainer = MakeTrainer();
  TestSource train(5, 7);
  train.fail_at = 2;
  Recorded rec;
  FitOptions options = Options(1, 5);
  options.rank = 3;
  options.log = rec.log;
  FitResult result;
  Status s = Fit(trainer.get(), &train, nullptr, options, rec.Callbacks(), &result);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(result.failed_at, "worker 3, epoch 0 batch 2: ");

  TestSource fine(2, 8);
  FitCallbacks cb = rec.Callbacks();
  cb.checkpoint = [](int64_t, int64_t, int64_t) { return Status::IoError("disk full"); };
  s = Fit(trainer.get(), &fine, nullptr, options, cb, &result);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(result.failed_at, "checkpoint after epoch 0: ");
}

TEST(Fit, SpeedometerLineIsMXNets) {
  SpeedometerWindow w;
  w.epoch = 2;
  w.first_batch = 20;
  w.last_batch = 40;
  w.seconds = 2.0;
  w.stats.samples = 64;
  w.stats.correct = 16;
  w.stats.loss_sum = 32.0;
  EXPECT_EQ(SpeedometerLine(w, 0, ""),
            "Epoch[2] Batch [20-40]\tSpeed: 32.00 samples/sec\taccuracy=0.250000\tcross-entropy=0.500000");
  w.stats.skipped_steps = 1;
  w.stats.topk_correct = 32;
  EXPECT_EQ(SpeedometerLine(w, 5, "\tdata 1%"),
            "Epoch[2] Batch [20-40]\tSpeed: 32.00 samples/sec\taccuracy=0.250000\ttop_k_accuracy_5=0.500000"
            "\tcross-entropy=0.500000\tskipped-steps=1\tdata 1%");
  w.stats.skipped_steps = 0;
  EXPECT_EQ(EpochMetricLines(2, "Train-", w.stats, 0),
            "Epoch[2] Train-accuracy=0.250000\nEpoch[2] Train-cross-entropy=0.500000\n");
}

// MXNet's tools/parse_log.py reads each metric with `.*Epoch\[(\d+)\] Train-NAME.*=([.\d]+)`
// line by line: the greedy `.*=` takes a line's last value, so each metric needs its own line.
TEST(FitLines, MxnetsParseLogReadsEachEpochMetric) {
  StepStats stats;
  stats.samples = 64;
  stats.correct = 16;
  stats.topk_correct = 48;
  stats.loss_sum = 32.0;
  const std::string log = EpochMetricLines(3, "Train-", stats, 5) + "Epoch[3] Time cost=1.500\n" +
                          EpochMetricLines(3, "Validation-", stats, 5);
  const std::pair<std::string, std::string> expect[] = {
      {"Train-accuracy", "0.250000"}, {"Train-top_k_accuracy_5", "0.750000"},
      {"Train-cross-entropy", "0.500000"}, {"Validation-accuracy", "0.250000"},
      {"Validation-cross-entropy", "0.500000"}};
  for (const auto& [name, value] : expect) {
    const std::regex re(".*Epoch\\[(\\d+)\\] " + name + ".*=([.\\d]+)");
    int found = 0;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (!std::regex_match(line, m, re)) continue;
      ++found;
      EXPECT_EQ(m[1].str(), "3") << line;
      EXPECT_EQ(m[2].str(), value) << line;
    }
    EXPECT_EQ(found, 1) << name << " in\n" << log;
  }
}

}  // namespace
}  // namespace tally
