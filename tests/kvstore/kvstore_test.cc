#include "kvstore/kvstore.h"

#include <gtest/gtest.h>

#include <limits>


namespace tally {
namespace {

Tensor Full(const Shape& s, float v, DType t = DType::kF32) {
  Tensor x = Tensor::Empty(s, t);
  x.Fill(v);
  return x;
}

std::unique_ptr<KVStore> Make(KVStoreType type, int devices) {
  KVStoreSpec spec;
  spec.type = type;
  spec.num_devices = devices;
  std::unique_ptr<KVStore> kv;
  Status s = KVStore::Create(spec, &kv);
  EXPECT_TRUE(s.ok()) << s;
  return kv;
}

TEST(KVStore, PushWithoutOptimizerStoresTheSumInDeviceOrder) {
  for (KVStoreType type : {KVStoreType::kLocal, KVStoreType::kDevice}) {
    auto kv = Make(type, 3);
    ASSERT_TRUE(kv->Init(7, Full({5}, 0.f)).ok());
    ASSERT_TRUE(kv->Push(7, {Full({5}, 1.5f), Full({5}, 2.25f), Full({5}, -0.5f, DType::kF16)}).ok());
    std::vector<Tensor> outs = {Full({5}, 9.f), Full({5}, 9.f), Full({5}, 9.f, DType::kF16)};
    ASSERT_TRUE(kv->Pull(7, outs).ok());
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(outs[0].data<float>()[i], 3.25f) << type;
      EXPECT_EQ(outs[1].data<float>()[i], 3.25f) << type;
      EXPECT_EQ(HalfToFloat(outs[2].data<uint16_t>()[i]), 3.25f) << type;
    }
  }
}

TEST(KVStore, SgdMomentumMatchesHandComputedSteps) {
  for (KVStoreType type : {KVStoreType::kLocal, KVStoreType::kDevice}) {
    auto kv = Make(type, 2);
    OptimizerConfig opt;
    opt.lr = 0.1f;
    opt.momentum = 0.9f;
    opt.wd = 0.0f;
    ASSERT_TRUE(kv->SetOptimizer(opt).ok());
    ASSERT_TRUE(kv->Init(0, Full({3}, 1.f)).ok());
    std::vector<Tensor> w = {Full({3}, 0.f), Full({3}, 0.f)};
    // Gradient sum 0.5: mom = -0.05, w = 0.95; then mom = 0.9 * -0.05 - 0.05 = -0.095, w = 0.855.
    ASSERT_TRUE(kv->PushPull(0, {Full({3}, 0.2f), Full({3}, 0.3f)}, w).ok());
    EXPECT_NEAR(w[1].data<float>()[2], 0.95f, 1e-7) << type;
    ASSERT_TRUE(kv->PushPull(0, {Full({3}, 0.2f), Full({3}, 0.3f)}, w).ok());
    EXPECT_NEAR(w[0].data<float>()[0], 0.855f, 1e-6) << type;
    EXPECT_EQ(w[0].data<float>()[1], w[1].data<float>()[1]) << type;
  }
}

TEST(KVStore, LearningRateChangeAppliesToTheNextUpdate) {
  auto kv = Make(KVStoreType::kLocal, 1);
  OptimizerConfig opt;
  opt.momentum = 0.0f;
  opt.wd = 0.0f;
  opt.lr = 1.0f;
  ASSERT_TRUE(kv->SetOptimizer(opt).ok());
  ASSERT_TRUE(kv->Init(0, Full({1}, 1.f)).ok());
  kv->SetLearningRate(0.25f);
  std::vector<Tensor> w = {Full({1}, 0.f)};
  ASSERT_TRUE(kv->PushPull(0, {Full({1}, 2.f)}, w).ok());
  EXPECT_FLOAT_EQ(w[0].data<float>()[0], 0.5f);
}

// A step with a NaN in one key's gradient changes no key: the keys updated before the NaN
// was seen are rolled back in WaitAll (weights, momentum and the pulled outputs), the keys
// after it are not updated, and the next step goes on as if the bad one had never come.
TEST(KVStore, ANonFiniteStepIsSkippedWholeAndRolledBackInWaitAll) {
  auto grad = [](int key, int step, int device) { return Full({3}, 0.25f * (key + 1) + 0.5f * step + 0.125f * device); };
  for (KVStoreType type : {KVStoreType::kLocal, KVStoreType::kDevice}) {
    OptimizerConfig opt;
    opt.lr = 0.5f;
    opt.momentum = 0.9f;
    opt.wd = 0.0f;
    auto run = [&](bool with_nan, std::vector<std::vector<Tensor>>* w) {
      auto kv = Make(type, 2);
      EXPECT_TRUE(kv->SetOptimizer(opt).ok());
      w->clear();
      for (int key = 0; key < 3; ++key) {
        EXPECT_TRUE(kv->Init(key, Full({3}, 1.f + key)).ok());
        w->push_back({Full({3}, 0.f), Full({3}, 0.f)});
      }
      const std::vector<int> steps = with_nan ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 2};
      std::vector<Tensor> after0(3);
      for (int step : steps) {
        for (int key = 0; key < 3; ++key) {
          std::vector<Tensor> g = {grad(key, step, 0), grad(key, step, 1)};
          if (with_nan && step == 1 && key == 1) g[1].data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
          EXPECT_TRUE(kv->PushPull(key, g, (*w)[key]).ok());
        }
        EXPECT_TRUE(kv->WaitAll().ok());
        SkippedStep skip;
        const bool skipped = kv->trainer_hooks()->TakeSkippedStep(&skip);
        EXPECT_EQ(skipped, with_nan && step == 1) << type << " step " << step;
        if (skipped) {
          EXPECT_EQ(skip.step, 1);
          EXPECT_EQ(skip.key, 1);
        }
        if (with_nan && step == 0) {
          for (int key = 0; key < 3; ++key) after0[key] = (*w)[key][0].Clone();
        }
        if (with_nan && step == 1) {
          for (int key = 0; key < 3; ++key) {
            for (int d = 0; d < 2; ++d) {
              for (int i = 0; i < 3; ++i) {
                EXPECT_EQ((*w)[key][d].data<float>()[i], after0[key].data<float>()[i]) << type << " key " << key;
              }
            }
          }
        }
      }
    };
    std::vector<std::vector<Tensor>> skipped, reference;
    run(true, &skipped);
    run(false, &reference);
    for (int key = 0; key < 3; ++key) {
      for (int d = 0; d < 2; ++d) {
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(skipped[key][d].data<float>()[i], reference[key][d].data<float>()[i]) << type << " key " << key;
        }
      }
    }
  }
}

TEST(KVStore, RefusesMisuseWithClearMessages) {
  KVStoreSpec spec;
  Status s = ParseKVStoreType("banana", &spec.type);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--kv-store 'banana'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("dist_device_sync"), std::string::npos) << s;  // the valid values
  spec.type = KVStoreType::kDistSync;  // without a Cluster
  std::unique_ptr<KVStore> kv;
  s = KVStore::Create(spec, &kv);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameter server"), std::string::npos) << s;

  kv = Make(KVStoreType::kDevice, 2);
  OptimizerConfig bad;
  bad.type = "adamax";
  s = kv->SetOptimizer(bad);
  EXPECT_NE(s.message().find("--optimizer"), std::string::npos) << s;
  s = kv->Push(3, {Full({2}, 1.f), Full({2}, 1.f)});
  EXPECT_NE(s.message().find("before Init"), std::string::npos) << s;
  ASSERT_TRUE(kv->Init(3, Full({2}, 0.f)).ok());
  EXPECT_FALSE(kv->Init(3, Full({2}, 0.f)).ok());
  s = kv->Push(3, {Full({2}, 1.f)});
  EXPECT_NE(s.message().find("1 values for 2 devices"), std::string::npos) << s;
  s = kv->Push(3, {Full({2}, 1.f), Full({4}, 1.f)});
  EXPECT_NE(s.message().find("does not match"), std::string::npos) << s;
}

// What only the training loop uses is behind trainer_hooks(): the CPU stores take no loss
// scale, keep no masters, cannot keep a step on a GPU, agree to stop once asked, and count
// their copies' time for the profiler.
TEST(KVStore, TheCpuStoresTrainerHooks) {
  for (KVStoreType type : {KVStoreType::kLocal, KVStoreType::kDevice}) {
    auto kv = Make(type, 2);
    TrainerHooks* hooks = kv->trainer_hooks();
    ASSERT_NE(hooks, nullptr);
    EXPECT_TRUE(hooks->SetGradientScale(1.0f).ok());
    const Status s = hooks->SetGradientScale(1024.0f);
    EXPECT_NE(s.message().find("--kv-store " + KVStoreTypeName(type)), std::string::npos) << s;
    EXPECT_EQ(hooks->master_weights(), nullptr);
    EXPECT_EQ(hooks->device_steps(), nullptr);
    EXPECT_FALSE(hooks->StopAgreed());
    hooks->RequestStop();
    EXPECT_TRUE(hooks->StopAgreed());
    ASSERT_TRUE(kv->Init({0, 1}, {Full({1 << 16}, 0.f), Full({3}, 0.f)}).ok());
    std::vector<Tensor> outs = {Full({1 << 16}, 9.f), Full({1 << 16}, 9.f)};
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(kv->PushPull(0, {Full({1 << 16}, 1.f), Full({1 << 16}, 2.f)}, outs).ok());
    EXPECT_EQ(outs[1].data<float>()[100], 3.0f);
    const TrainerHooks::Times t = hooks->TakeTimes();
    EXPECT_TRUE(t.on_caller_thread);
    EXPECT_GT(t.pull_us, 0) << type;
    EXPECT_EQ(hooks->TakeTimes().pull_us, 0);  // taken
    EXPECT_FALSE(kv->Init(std::vector<int>{2}, std::vector<Tensor>{}).ok());  // a key without its value
    EXPECT_FALSE(kv->Init(3, Tensor()).ok());
  }
}

// --elastic's calls are behind membership_view(): a store whose workers never change answers
// with its one worker live from step 0, no change heard and its pulls summing it alone.
TEST(KVStore, TheCpuStoresMembershipViewIsTheirOneWorkerForever) {
  for (KVStoreType type : {KVStoreType::kLocal, KVStoreType::kDevice}) {
    auto kv = Make(type, 2);
    MembershipView* view = kv->membership_view();
    ASSERT_NE(view, nullptr);
    const MembershipView::Membership m = view->membership();
    EXPECT_EQ(m.epoch, 0) << type;
    EXPECT_EQ(m.from_step, 0) << type;
    EXPECT_EQ(m.live, std::vector<int>{0}) << type;
    std::vector<MembershipView::Membership> heard(3);
    ASSERT_TRUE(view->HeardMembership(&heard).ok());
    EXPECT_TRUE(heard.empty()) << type;
    EXPECT_EQ(view->summed_workers(), kv->num_workers());
    EXPECT_EQ(view->first_step(), 0);
    EXPECT_EQ(kv->membership_view(), view) << "one view, owned by the store";
  }
}

}  // namespace
}  // namespace tally
