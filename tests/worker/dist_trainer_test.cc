// Training through the parameter server: two workers and two servers as threads of this
// process (tests/local_job.h) against single-process training.
#include <cmath>
#include <mutex>

#include <gtest/gtest.h>

#include "data/synthetic_data.h"
#include "tests/local_job.h"
#include "worker/trainer.h"

namespace tally {
namespace {

TrainerConfig SmallConfig(KVStoreType kv) {
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
  TrainerConfig ref_cfg = SmallConfig(KVStoreType::kLocal);
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
    TrainerConfig cfg = SmallConfig(KVStoreType::kDistSync);
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
    StepStats last;
    ASSERT_TRUE(t->Finish(&last).ok());  // the last step's pulls (overlap leaves them in flight)
    EXPECT_LT(MaxRelativeDifference(t->replica(0), ref->replica(0)), 1e-5) << "worker " << rank;
  });
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(loss[step], ref_loss[step], 1e-4 * std::fabs(ref_loss[step])) << "step " << step;
  }
}

double MaxRelativeDifference(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].tensor.numel(), b[i].tensor.numel()) << a[i].name;
    for (int64_t j = 0; j < std::min(a[i].tensor.numel(), b[i].tensor.numel()); ++j) {
      const double x = a[i].tensor.data<float>()[j], y = b[i].tensor.data<float>()[j];
      worst = std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
    }
  }
  return worst;
}

// Checkpoints in dist_sync: worker 0's snapshot reads the momentum from the servers; a new
// job started from it continues as single-process training does.
TEST_P(DistTrainerTest, ASnapshotFromTheServersResumesExactly) {
  constexpr int kSteps = 10, kBatch = 16, kHalf = kBatch / 2;
  TrainerConfig ref_cfg = SmallConfig(KVStoreType::kLocal);
  ref_cfg.model.bn_use_global_stats = true;
  std::unique_ptr<Trainer> ref;
  ASSERT_TRUE(Trainer::Create(ref_cfg, &ref).ok());
  SyntheticData ref_data(ref_cfg.model.image_shape, 4, 5);
  Checkpoint ref_mid, ref_end;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      ASSERT_TRUE(ref->Snapshot(&ref_mid).ok());
    }
    Tensor x, y;
    ref_data.NextBatch(kBatch, &x, &y);
    StepStats s;
    ASSERT_TRUE(ref->Step(x, y, &s).ok());
  }
  ASSERT_TRUE(ref->Snapshot(&ref_end).ok());
  size_t trainable = 0;
  for (const Parameter* p : ref->replica(0).Parameters()) trainable += p->trainable;
  ASSERT_EQ(ref_end.states.size(), trainable) << "every trainable parameter has momentum";

  // Steps [first, last) of the two-worker job, from `resume` when given; worker 0's snapshot.
  auto run = [&](int first, int last, const Checkpoint* resume, Checkpoint* snapshot) {
    LocalJob job(GetParam(), 2, 2);
    job.Run([&](int rank, Cluster* cluster) {
      TrainerConfig cfg = SmallConfig(KVStoreType::kDistSync);
      cfg.model.bn_use_global_stats = true;
      cfg.cluster = cluster;
      std::unique_ptr<Trainer> t;
      Status st = Trainer::Create(cfg, &t, resume);
      ASSERT_TRUE(st.ok()) << st;
      SyntheticData data(cfg.model.image_shape, 4, 5);
      for (int step = 0; step < last; ++step) {
        Tensor x, y;
        data.NextBatch(kBatch, &x, &y);
        if (step < first) continue;
        StepStats s;
        st = t->Step(x.Slice(rank * kHalf, (rank + 1) * kHalf), y.Slice(rank * kHalf, (rank + 1) * kHalf), &s);
        ASSERT_TRUE(st.ok()) << st;
      }
      if (rank == 0) {
        st = t->Snapshot(snapshot);
        ASSERT_TRUE(st.ok()) << st;
      }
    });
  };
  Checkpoint mid, end;
  run(0, kSteps / 2, nullptr, &mid);
  EXPECT_LT(MaxRelativeDifference(mid.states, ref_mid.states), 1e-5);
  EXPECT_LT(MaxRelativeDifference(mid.params, ref_mid.params), 1e-5);
  run(kSteps / 2, kSteps, &mid, &end);
  EXPECT_LT(MaxRelativeDifference(end.states, ref_end.states), 1e-5);
  EXPECT_LT(MaxRelativeDifference(end.params, ref_end.params), 1e-5);
}

// Overlap changes when the weights are waited for, not which: with it on and off, two
// workers end with the same weights, bit for bit.
TEST_P(DistTrainerTest, OverlapOnAndOffGiveTheSameWeights) {
  constexpr int kSteps = 6, kBatch = 8;
  std::vector<std::vector<float>> weights[2];  // [overlap][rank 0's parameters]
  for (int overlap = 0; overlap < 2; ++overlap) {
    LocalJob job(GetParam(), 2, 2);
    job.Run([&](int rank, Cluster* cluster) {
      TrainerConfig cfg = SmallConfig(KVStoreType::kDistSync);
      cfg.cluster = cluster;
      cfg.overlap = overlap == 1;
      std::unique_ptr<Trainer> t;
      Status st = Trainer::Create(cfg, &t);
      ASSERT_TRUE(st.ok()) << st;
      SyntheticData data(cfg.model.image_shape, 4, 5, /*stream=*/rank);
      StepStats s;
      for (int step = 0; step < kSteps; ++step) {
        Tensor x, y;
        data.NextBatch(kBatch, &x, &y);
        st = t->Step(x, y, &s);
        ASSERT_TRUE(st.ok()) << st;
        EXPECT_EQ(t->in_flight(), overlap == 1) << "step " << step;
      }
      ASSERT_TRUE(t->Finish(&s).ok());
      EXPECT_FALSE(t->in_flight());
      if (rank != 0) return;
      for (const Parameter* p : t->replica(0).Parameters()) {
        weights[overlap].emplace_back(p->value.data<float>(), p->value.data<float>() + p->value.numel());
      }
    });
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t i = 0; i < weights[0].size(); ++i) EXPECT_EQ(weights[0][i], weights[1][i]) << "parameter " << i;
}

// SIGTERM reaches one worker: its request rides on its pushes, and every worker learns
// of it in the answers of the same step — the step itself with overlap off, the next one
// with it on (the answers of step t are waited for in step t + 1's forward pass).
TEST_P(DistTrainerTest, AStopAskedByOneWorkerIsAgreedByAllAtTheSameStep) {
  for (const bool overlap : {false, true}) {
    std::mutex mu;
    std::vector<int> stopped_after(2, -1);
    LocalJob job(GetParam(), 2, 1);
    job.Run([&](int rank, Cluster* cluster) {
      TrainerConfig cfg = SmallConfig(KVStoreType::kDistSync);
      cfg.cluster = cluster;
      cfg.overlap = overlap;
      std::unique_ptr<Trainer> t;
      Status st = Trainer::Create(cfg, &t);
      ASSERT_TRUE(st.ok()) << st;
      SyntheticData data(cfg.model.image_shape, 4, 5, /*stream=*/rank);
      for (int step = 0; step < 8; ++step) {
        if (rank == 1 && step == 3) t->RequestStop();
        Tensor x, y;
        data.NextBatch(8, &x, &y);
        StepStats s;
        st = t->Step(x, y, &s);
        ASSERT_TRUE(st.ok()) << st;
        if (t->StopAgreed()) {
          ASSERT_TRUE(t->Finish(&s).ok());
          std::lock_guard<std::mutex> l(mu);
          stopped_after[rank] = step;
          break;
        }
      }
    });
    EXPECT_EQ(stopped_after[0], overlap ? 4 : 3) << "overlap " << overlap;
    EXPECT_EQ(stopped_after[1], overlap ? 4 : 3) << "overlap " << overlap;
  }
}

// dist_async: each push is applied when it arrives; two workers still learn the classes.
TEST_P(DistTrainerTest, AsyncTrainingLearnsTheSyntheticClasses) {
  LocalJob job(GetParam(), 2, 2);
  job.Run([&](int rank, Cluster* cluster) {
    TrainerConfig cfg = SmallConfig(KVStoreType::kDistAsync);
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
    StepStats last;
    ASSERT_TRUE(t->Finish(&last).ok());
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
