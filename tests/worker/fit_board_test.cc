// FitBoard (worker/fit_board.h): the curves it writes from given step records, Speedometer
// windows and epochs, read back from its event file record by record.
#include "worker/fit_board.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/tensorboard/read_events.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

// Every event after the file's first, as {tag: value} with its step.
struct Point {
  int64_t step;
  std::map<std::string, float> values;
};

std::vector<Point> Read(const std::string& path) {
  std::vector<Point> points;
  const std::vector<tensorboard::Event> events = tensorboard::ReadEventFile(path);
  EXPECT_FALSE(events.empty());
  for (size_t i = 1; i < events.size(); ++i) {
    Point p{events[i].step(), {}};
    for (const auto& v : events[i].summary().value()) p.values[v.tag()] = v.simple_value();
    points.push_back(p);
  }
  return points;
}

profile::StepRecord Step(int64_t data_us, int64_t push_us, int64_t wait_us, int64_t dur_us) {
  profile::StepRecord r;
  r.phase(profile::Phase::kData) = data_us;
  r.phase(profile::Phase::kPush) = push_us;
  r.phase(profile::Phase::kWait) = wait_us;
  r.phase(profile::Phase::kForward) = dur_us - data_us - push_us - wait_us;
  r.dur_us = dur_us;
  return r;
}

class FitBoardTest : public ::testing::Test {
 protected:
  std::unique_ptr<FitBoard> Open(int top_k) {
    std::unique_ptr<tensorboard::EventWriter> writer;
    EXPECT_TRUE(tensorboard::EventWriter::Open(dir_.Path("worker-0"), &writer).ok());
    return std::make_unique<FitBoard>(std::move(writer), [this] { return scale_; }, top_k);
  }
  ScopedTempDir dir_{"fit_board_test"};
  double scale_ = 65536;
};

TEST_F(FitBoardTest, AWindowsCurvesAtItsStep) {
  auto board = Open(/*top_k=*/5);
  const std::string path = board->path();
  board->AddStep(Step(/*data=*/1000, /*push=*/2000, /*wait=*/3000, /*dur=*/10000));
  board->AddStep(Step(3000, 0, 1000, 10000));
  SpeedometerWindow w;
  w.epoch = 1;
  w.first_batch = 0;
  w.last_batch = 2;
  w.seconds = 0.5;
  w.step = 42;
  w.lr = 0.025;
  w.stats.samples = 64;
  w.stats.loss_sum = 96;
  w.stats.correct = 16;
  w.stats.topk_correct = 48;
  w.stats.skipped_steps = 1;
  board->AddWindow(w);
  scale_ = 32768;
  board->AddWindow(w);  // no step since the last window: no time split
  board.reset();

  const std::vector<Point> points = Read(path);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].step, 42);
  const std::map<std::string, float> want = {
      {"train/loss", 1.5f},           {"train/accuracy", 0.25f},        {"train/top_k_accuracy", 0.75f},
      {"train/learning_rate", 0.025f}, {"train/samples_per_sec", 128.f}, {"train/skipped_steps", 1.f},
      {"train/loss_scale", 65536.f},  {"time/data_wait_share", 0.2f},   {"time/comm_share", 0.3f},
      {"time/step_ms", 10.f}};
  EXPECT_EQ(points[0].values, want);
  EXPECT_EQ(points[1].values.count("time/step_ms"), 0u);
  EXPECT_EQ(points[1].values.at("train/loss_scale"), 32768.f);
}

TEST_F(FitBoardTest, AnEpochsCurvesWithAndWithoutValidation) {
  auto board = Open(/*top_k=*/0);
  const std::string path = board->path();
  StepStats train, val;
  train.samples = 100;
  train.loss_sum = 50;
  train.correct = 90;
  val.samples = 10;
  val.loss_sum = 20;
  val.correct = 0;  // 0 is a point too
  board->AddEpoch(0, 25, train, &val);
  board->AddEpoch(1, 50, train, nullptr);
  board.reset();

  const std::vector<Point> points = Read(path);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].step, 25);
  const std::map<std::string, float> want = {{"epoch/train_loss", 0.5f}, {"epoch/train_accuracy", 0.9f},
                                             {"epoch/val_loss", 2.f}, {"epoch/val_accuracy", 0.f}};
  EXPECT_EQ(points[0].values, want);
  EXPECT_EQ(points[1].step, 50);
  EXPECT_EQ(points[1].values.size(), 2u);  // no validation set: no val_ curves
}

TEST_F(FitBoardTest, AttachKeepsTheRunsOwnCallbacks) {
  auto board = Open(0);
  const std::string path = board->path();
  FitCallbacks cb;
  int windows = 0, epochs = 0;
  cb.speedometer = [&](const SpeedometerWindow&) { ++windows; };
  cb.epoch_ends = [&](int, int64_t, const StepStats&, const StepStats*) { ++epochs; };
  board->Attach(&cb);
  ASSERT_TRUE(cb.step_ends);
  cb.step_ends(Step(0, 0, 0, 1000));
  SpeedometerWindow w;
  w.seconds = 1;
  w.step = 7;
  w.stats.samples = 8;
  cb.speedometer(w);
  cb.epoch_ends(0, 9, w.stats, nullptr);
  board.reset();
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(epochs, 1);
  const std::vector<Point> points = Read(path);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].step, 7);
  EXPECT_EQ(points[0].values.at("time/step_ms"), 1.f);
  EXPECT_EQ(points[1].step, 9);
}

}  // namespace
}  // namespace tally
