// Training through the parameter server: two workers and two servers as threads of this
// process (tests/local_job.h) against single-process training.
#include <cmath>
#include <mutex>

#include <gtest/gtest.h>

#include "tests/local_job.h"
#include "worker/synthetic_data.h"
#include "worker/trainer.h"

namespace tally {
namespace {

TrainerConfig SmallConfig(const std::string& kv) {
  TrainerConfig cfg;
  cfg.model.num_layers = 8;  // CIFAR-style, one block per stage
  cfg.model.num_classes = 4;
  cfg.model.image_shape = {3, 12, 12};
  cfg.model.seed = 11;
  cfg.kv_store = kv;
  cfg.optimizer.lr = 0.05f;
  cfg.optimizer.momentum = 0.9f;
  cfg.optimizer.wd = 1e-4f;
  cfg.top_k = 1;
  return cfg;
}

// Largest |a - b| / max(1, |b|) over every trainable parameter.
double MaxRelativeDifference(Network& a, Network& b) {
  double worst = 0;
  for (size_t i = 0; i < a.Parameters().size(); ++i) {
    const Parameter& pa = *a.Parameters()[i];
    const Parameter& pb = *b.Parameters()[i];
    if (!pa.trainable) continue;
    for (int64_t j = 0; j < pa.value.numel(); ++j) {
      const double x = pa.value.data<float>()[j], y = pb.value.data<float>()[j];
      worst = std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
    }
  }
  return worst;
}

class DistTrainerTest : public ::testing::TestWithParam<bool> {};

// With BN on running statistics each example's loss does not depend on its batch mates, so
// two workers with half the global batch each must follow single-process training.
TEST_P(DistTrainerTest, TwoWorkersWithHalfTheBatchTrainLikeOneProcess) {
  constexpr int kSteps = 20, kBatch = 16;
  TrainerConfig ref_cfg = SmallConfig("local");
  ref_cfg.model.bn_use_global_stats = true;
  std::unique_ptr<Trainer> ref;
  ASSERT_TRUE(Trainer::Create(ref_cfg, &ref).ok());
  SyntheticData ref_data(ref_cfg.model.image_shape, 4, 5);
  std::vector<double> ref_loss;
  for (int step = 0; step < kSteps; ++step) {
    Tensor x, y;
    ref_data.NextBatch(kBatch, &x, &y);
    StepStats s;
    ASSERT_TRUE(ref->Step(x, y, &s).ok());
    ref_loss.push_back(s.loss_sum);
  }

  std::mutex mu;
  std::vector<double> loss(kSteps, 0.0);
  LocalJob job(GetParam(), 2, 2);
  job.Run([&](int rank, Cluster* cluster) {
    TrainerConfig cfg = SmallConfig("dist_sync");
    cfg.model.bn_use_global_stats = true;
    cfg.cluster = cluster;
    std::unique_ptr<Trainer> t;
    Status st = Trainer::Create(cfg, &t);
    ASSERT_TRUE(st.ok()) << st;
    SyntheticData data(cfg.model.image_shape, 4, 5);
    for (int step = 0; step < kSteps; ++step) {
      Tensor x, y;
      data.NextBatch(kBatch, &x, &y);
      const int half = kBatch / 2;
      StepStats s;
      st = t->Step(x.Slice(rank * half, (rank + 1) * half), y.Slice(rank * half, (rank + 1) * half), &s);
      ASSERT_TRUE(st.ok()) << st;
      std::lock_guard<std::mutex> l(mu);
      loss[step] += s.loss_sum;
    }
    EXPECT_LT(MaxRelativeDifference(t->replica(0), ref->replica(0)), 1e-5) << "worker " << rank;
  });
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(loss[step], ref_loss[step], 1e-4 * std::fabs(ref_loss[step])) << "step " << step;
  }
}

// dist_async: each push is applied when it arrives; two workers still learn the classes.
TEST_P(DistTrainerTest, AsyncTrainingLearnsTheSyntheticClasses) {
  LocalJob job(GetParam(), 2, 2);
  job.Run([&](int rank, Cluster* cluster) {
    TrainerConfig cfg = SmallConfig("dist_async");
    cfg.cluster = cluster;
    std::unique_ptr<Trainer> t;
    Status st = Trainer::Create(cfg, &t);
    ASSERT_TRUE(st.ok()) << st;
    const float signal = 0.6f;  // clear classes, so that a few steps are enough
    SyntheticData train(cfg.model.image_shape, 4, 1, /*stream=*/rank, signal);
    for (int step = 0; step < 40; ++step) {
      Tensor x, y;
      train.NextBatch(16, &x, &y);
      StepStats s;
      st = t->Step(x, y, &s);
      ASSERT_TRUE(st.ok()) << st;
    }
    // Every worker's pushes are in once both have passed this barrier; pull the result.
    ASSERT_TRUE(t->kvstore().Barrier().ok());
    for (size_t i = 0; i < t->replica(0).Parameters().size(); ++i) {
      Parameter* p = t->replica(0).Parameters()[i];
      if (!p->trainable) continue;
      ASSERT_TRUE(t->kvstore().Pull(static_cast<int>(i), {p->value}).ok());
    }
    ASSERT_TRUE(t->kvstore().WaitAll().ok());
    SyntheticData val(cfg.model.image_shape, 4, 1, /*stream=*/7, signal);
    Tensor x, y;
    val.NextBatch(64, &x, &y);
    StepStats v;
    ASSERT_TRUE(t->Evaluate(x, y, &v).ok());
    EXPECT_GT(double(v.correct) / v.samples, 0.8) << "worker " << rank << ", loss " << v.loss_sum / v.samples;
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, DistTrainerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "zmq" : "inproc"; });

}  // namespace
}  // namespace tally
