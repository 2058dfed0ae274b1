#include "worker/trainer.h"

#include <cmath>

#include <gtest/gtest.h>

#include "data/synthetic_data.h"

namespace tally {
namespace {

TrainerConfig SmallConfig(int devices, KVStoreType kv) {
  TrainerConfig cfg;
  cfg.model.num_layers = 8;  // CIFAR-style, one block per stage
  cfg.model.num_classes = 4;
  cfg.model.image_shape = {3, 12, 12};
  cfg.model.seed = 11;
  cfg.num_devices = devices;
  cfg.kv_store = kv;
  cfg.optimizer.lr = 0.05f;
  cfg.optimizer.momentum = 0.9f;
  cfg.optimizer.wd = 1e-4f;
  cfg.top_k = 2;
  return cfg;
}

std::unique_ptr<Trainer> Make(const TrainerConfig& cfg) {
  std::unique_ptr<Trainer> t;
  Status s = Trainer::Create(cfg, &t);
  EXPECT_TRUE(s.ok()) << s;
  return t;
}

// Largest |a - b| / max(1, |b|) over every parameter of two replicas.
double MaxRelativeDifference(Network& a, Network& b) {
  double worst = 0;
  const auto& pa = a.Parameters();
  const auto& pb = b.Parameters();
  EXPECT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const float* x = pa[i]->value.data<float>();
    const float* y = pb[i]->value.data<float>();
    for (int64_t j = 0; j < pa[i]->value.numel(); ++j) {
      worst = std::max(worst, std::fabs(double(x[j]) - y[j]) / std::max(1.0, std::fabs(double(y[j]))));
    }
  }
  return worst;
}

// With BN on running statistics each example's loss does not depend on its batch mates, so
// splitting the batch over devices must not change the training trajectory.
TEST(Trainer, TwoDevicesTrainLikeOneWithTheSameGlobalBatch) {
  for (KVStoreType kv : {KVStoreType::kDevice, KVStoreType::kLocal}) {
    TrainerConfig one = SmallConfig(1, KVStoreType::kLocal), two = SmallConfig(2, kv);
    one.model.bn_use_global_stats = two.model.bn_use_global_stats = true;
    auto t1 = Make(one);
    auto t2 = Make(two);
    SyntheticData data(one.model.image_shape, 4, 5);
    for (int step = 0; step < 5; ++step) {
      Tensor x, y;
      data.NextBatch(16, &x, &y);
      StepStats s1, s2;
      ASSERT_TRUE(t1->Step(x, y, &s1).ok());
      ASSERT_TRUE(t2->Step(x, y, &s2).ok());
      EXPECT_NEAR(s1.loss_sum, s2.loss_sum, 1e-4 * std::fabs(s1.loss_sum)) << kv << " step " << step;
      EXPECT_EQ(s1.samples, s2.samples);
    }
    EXPECT_LT(MaxRelativeDifference(t1->replica(0), t2->replica(0)), 1e-5) << kv;
    EXPECT_LT(MaxRelativeDifference(t1->replica(0), t2->replica(1)), 1e-5) << kv;
  }
}

TEST(Trainer, ReplicasStayIdenticalWithBatchStatistics) {
  auto t = Make(SmallConfig(2, KVStoreType::kDevice));
  SyntheticData data({3, 12, 12}, 4, 6);
  Tensor x, y;
  for (int step = 0; step < 3; ++step) {
    data.NextBatch(8, &x, &y);
    StepStats s;
    ASSERT_TRUE(t->Step(x, y, &s).ok());
  }
  // Trainable weights are shared through the kvstore; running statistics are per replica.
  const auto& a = t->replica(0).Parameters();
  const auto& b = t->replica(1).Parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i]->trainable) continue;
    for (int64_t j = 0; j < a[i]->value.numel(); ++j) {
      ASSERT_EQ(a[i]->value.data<float>()[j], b[i]->value.data<float>()[j]) << a[i]->name;
    }
  }
}

TEST(Trainer, LearnsTheSyntheticClasses) {
  TrainerConfig cfg = SmallConfig(1, KVStoreType::kDevice);
  auto t = Make(cfg);
  const float signal = 0.6f;  // clear classes, so that a few steps are enough
  SyntheticData train(cfg.model.image_shape, 4, 1, 0, signal), val(cfg.model.image_shape, 4, 1, 1, signal);
  Tensor x, y;
  for (int step = 0; step < 40; ++step) {
    train.NextBatch(16, &x, &y);
    StepStats s;
    ASSERT_TRUE(t->Step(x, y, &s).ok());
  }
  StepStats v;
  val.NextBatch(64, &x, &y);
  ASSERT_TRUE(t->Evaluate(x, y, &v).ok());
  EXPECT_GT(double(v.correct) / v.samples, 0.8) << "loss " << v.loss_sum / v.samples;
  EXPECT_GE(v.topk_correct, v.correct);
}

TEST(Trainer, RefusesABatchThatDoesNotSplit) {
  auto t = Make(SmallConfig(2, KVStoreType::kDevice));
  SyntheticData data({3, 12, 12}, 4, 0);
  Tensor x, y;
  data.NextBatch(5, &x, &y);
  StepStats s;
  Status st = t->Step(x, y, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--batch-size 5"), std::string::npos) << st;
}

}  // namespace
}  // namespace tally
