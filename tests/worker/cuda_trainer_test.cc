// The Trainer on GPUs: one GPU in fp32 follows the CPU's trajectory; fp16 with dynamic loss
// scaling trains (the loss falls) and an overflowing step is skipped and halves the scale;
// --benchmark's kept device batch; a checkpoint of a 16-bit model holds fp32 weights. And,
// runnable anywhere, the errors for GPU settings that cannot work. GPU tests skip visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "data/synthetic_data.h"
#include "ops/device.h"
#include "base/fault_hooks.h"
#include "tests/local_job.h"
#include "tests/ops/cuda_compare.h"
#include "worker/trainer.h"

namespace tally {
namespace {

TrainerConfig SmallConfig() {
  TrainerConfig cfg;
  cfg.model.num_layers = 8;  // CIFAR-style, one block per stage
  cfg.model.num_classes = 4;
  cfg.model.image_shape = {3, 12, 12};
  cfg.model.seed = 11;
  cfg.kv_store = KVStoreType::kDevice;
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

std::string CreateError(const TrainerConfig& cfg) {
  std::unique_ptr<Trainer> t;
  Status s = Trainer::Create(cfg, &t);
  return s.ok() ? "" : s.message();
}

TEST(TrainerGpuSettingsTest, RefusedWithTheirReason) {
  TrainerConfig cfg = SmallConfig();
  cfg.dtype = DType::kF16;
  EXPECT_NE(CreateError(cfg).find("--dtype float16 needs --gpus"), std::string::npos) << CreateError(cfg);
  cfg = SmallConfig();
  cfg.gpus = {CudaDeviceCount()};  // one past the last GPU (cuda:0 on a machine without)
  EXPECT_NE(CreateError(cfg).find("--gpus: cuda:" + std::to_string(CudaDeviceCount())), std::string::npos)
      << CreateError(cfg);
  if (CudaDeviceCount() > 0) {
    cfg.gpus = {0, 0};
    EXPECT_NE(CreateError(cfg).find("names cuda:0 twice"), std::string::npos) << CreateError(cfg);
    cfg.gpus = {0};
    cfg.kv_store = KVStoreType::kDistSync;  // without a job to join
    EXPECT_NE(CreateError(cfg).find("--kv-store dist_sync on GPUs"), std::string::npos) << CreateError(cfg);
  }
}

TEST(CudaTrainerTest, Fp32FollowsTheCpu) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(false);
  TrainerConfig cpu_cfg = SmallConfig(), gpu_cfg = SmallConfig();
  gpu_cfg.gpus = {0};
  auto cpu = Make(cpu_cfg), gpu = Make(gpu_cfg);
  SyntheticData data(cpu_cfg.model.image_shape, 4, 5);
  for (int step = 0; step < 5; ++step) {
    Tensor x, y;
    data.NextBatch(16, &x, &y);
    StepStats a, b;
    ASSERT_TRUE(cpu->Step(x, y, &a).ok());
    ASSERT_TRUE(gpu->Step(x, y, &b).ok());
    gpu->ReadStats(&b);
    EXPECT_NEAR(b.loss_sum, a.loss_sum, 1e-3 * std::abs(a.loss_sum)) << "step " << step;
  }
  const auto& pc = cpu->replica(0).Parameters();
  const auto& pg = gpu->replica(0).Parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_LE(testing::RelativeError(pg[i]->value, pc[i]->value), 1e-4) << pc[i]->name;
  }
}

TEST(CudaTrainerTest, Fp16WithLossScalingTrains) {
  TALLY_REQUIRE_GPU();
  TrainerConfig cfg = SmallConfig();
  cfg.gpus = {0};
  cfg.dtype = DType::kF16;
  auto t = Make(cfg);
  EXPECT_EQ(t->loss_scaler().scale(), 65536.0f);
  SyntheticData data(cfg.model.image_shape, 4, 5);
  Tensor x, y;
  data.NextBatch(32, &x, &y);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    StepStats s;
    ASSERT_TRUE(t->Step(x, y, &s).ok());
    t->ReadStats(&s);
    if (step == 0) first = s.loss_sum;
    last = s.loss_sum;
  }
  EXPECT_LT(last, 0.5 * first) << "one batch, 30 steps: the loss must fall";
  EXPECT_EQ(t->replica(0).Parameters()[0]->value.dtype(), DType::kF16);
  Checkpoint c;
  ASSERT_TRUE(t->Snapshot(&c).ok());
  for (const NamedTensor& p : c.params) {
    EXPECT_EQ(p.tensor.dtype(), DType::kF32) << p.name;
    EXPECT_TRUE(p.tensor.device().is_cpu()) << p.name;
  }
}

constexpr int kDistSteps = 10, kDistBatch = 16;

// One GPU process training kDistSteps steps on the whole batch: its weights, skipped steps
// and final loss scale.
struct OneProcessRun {
  Checkpoint weights;
  StepStats stats;
  float scale = 0;
};
void TrainOneProcess(const TrainerConfig& cfg, OneProcessRun* run) {
  auto t = Make(cfg);
  ASSERT_TRUE(t);
  SyntheticData data(cfg.model.image_shape, 4, 5);
  for (int step = 0; step < kDistSteps; ++step) {
    Tensor x, y;
    data.NextBatch(kDistBatch, &x, &y);
    ASSERT_TRUE(t->Step(x, y, &run->stats).ok());
  }
  t->ReadStats(&run->stats);
  ASSERT_TRUE(t->Snapshot(&run->weights).ok());
  run->scale = t->loss_scaler().scale();
}

// A two-worker job whose workers each train on `gpus` (the workers share them here) in
// dtype, gradients and weights through host buffers: it trains like one GPU process with
// the whole batch, the servers' fp32 weights are what a checkpoint saves, and every worker
// agrees on the weights. fp32 differs from the one process only in the order of the sums.
// fp16 rounds each worker's gradient of half the batch where the one process rounds the
// whole batch's, and biases (sums of many terms of both signs, from zero) move by their
// roundings: the job may be as far from the one process as a few times the distance
// between the one process in fp16 and in fp32 (the probe).
void ExpectDistJobTrainsLikeOneProcess(KVStoreType kv_store, const std::vector<int>& gpus,
                                       DType dtype) {
  TrainerConfig ref_cfg = SmallConfig();
  ref_cfg.model.bn_use_global_stats = true;
  ref_cfg.gpus = {0};
  ref_cfg.dtype = dtype;
  // Loss scaling skips a step whose scaled gradient overflows, and a worker's gradient of
  // half the batch overflows at other scales than the whole batch's (on an H100 the one
  // process skipped 3 of 10 steps from 2^16, the workers 1): the trajectories agree only from
  // a scale at which neither overflows. tests/kvstore/dist_kvstore_test.cc covers a step
  // skipped on every worker.
  ref_cfg.loss_scale.init = 2048.0f;
  OneProcessRun ref, probe;
  TrainOneProcess(ref_cfg, &ref);
  if (dtype != DType::kF32) {
    TrainerConfig probe_cfg = ref_cfg;
    probe_cfg.dtype = DType::kF32;
    TrainOneProcess(probe_cfg, &probe);
  }
  std::mutex mu;
  std::vector<Checkpoint> got(2);
  std::vector<StepStats> got_stats(2);
  std::vector<float> got_scale(2);
  LocalJob job(/*zmq=*/false, 2, 1);
  job.Run([&](int rank, Cluster* cluster) {
    TrainerConfig cfg = ref_cfg;
    cfg.kv_store = kv_store;
    cfg.gpus = gpus;
    cfg.cluster = cluster;
    std::unique_ptr<Trainer> t;
    Status st = Trainer::Create(cfg, &t);
    ASSERT_TRUE(st.ok()) << st;
    SyntheticData data(cfg.model.image_shape, 4, 5);
    for (int step = 0; step < kDistSteps; ++step) {
      Tensor x, y;
      data.NextBatch(kDistBatch, &x, &y);
      const int half = kDistBatch / 2;
      StepStats s;
      st = t->Step(x.Slice(rank * half, (rank + 1) * half), y.Slice(rank * half, (rank + 1) * half), &s);
      ASSERT_TRUE(st.ok()) << st;
      std::lock_guard<std::mutex> l(mu);
      got_stats[rank].Add(s);
    }
    ASSERT_TRUE(t->Finish(&got_stats[rank]).ok());  // the last step, left in flight by --overlap
    t->ReadStats(&got_stats[rank]);
    Checkpoint c;
    ASSERT_TRUE(t->Snapshot(&c).ok());
    std::lock_guard<std::mutex> l(mu);
    got[rank] = c;
    got_scale[rank] = t->loss_scaler().scale();
  });
  // The same skipped steps (none) and the same scale, or the weights differ by whole steps.
  EXPECT_EQ(got_stats[0].skipped_steps, ref.stats.skipped_steps);
  EXPECT_EQ(got_scale[0], ref.scale);
  const std::vector<NamedTensor>& want = ref.weights.params;
  ASSERT_EQ(got[0].params.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = testing::RelativeError(got[0].params[i].tensor, want[i].tensor);
    const double probe_err = dtype == DType::kF32 ? 0 : testing::RelativeError(probe.weights.params[i].tensor, want[i].tensor);
    std::printf("%s %s %-24s job %.3g probe %.3g\n", KVStoreTypeName(kv_store).c_str(), DTypeName(dtype),
                want[i].name.c_str(), err, probe_err);
    EXPECT_LE(err, std::max(1e-4, 4 * probe_err)) << want[i].name << " (probe " << probe_err << ")";
    EXPECT_EQ(testing::RelativeError(got[1].params[i].tensor, got[0].params[i].tensor), 0.0) << want[i].name;
  }
}

TEST(CudaTrainerTest, DistSyncWithGpuWorkersTrainsLikeOneProcess) {
  TALLY_REQUIRE_GPU();
  ExpectDistJobTrainsLikeOneProcess(KVStoreType::kDistSync, {0}, DType::kF32);
  ExpectDistJobTrainsLikeOneProcess(KVStoreType::kDistSync, {0}, DType::kF16);
}

// dist_device_sync with two GPUs per worker: each worker sums its GPUs' gradients with NCCL
// before pushing one.
TEST(CudaTrainerTest, DistDeviceSyncReducesAWorkersGpusBeforePushing) {
  TALLY_REQUIRE_TWO_GPUS();
  ExpectDistJobTrainsLikeOneProcess(KVStoreType::kDistDeviceSync, {0, 1}, DType::kF16);
}

// A NaN gradient (FaultHooks::nan_step) is an overflow: the step changes no weight, is counted as
// skipped, and the scale halves; with the step's figures kept on the device (the default)
// and without (the step waits for the finite check and reports which key overflowed).
void ExpectOverflowSkipsTheStep(bool step_on_device) {
  FaultHooks hooks;
  hooks.nan_worker = 0;
  hooks.nan_step = 2;
  SetFaultHooks(hooks);
  TrainerConfig cfg = SmallConfig();
  cfg.gpus = {0};
  cfg.dtype = DType::kF16;
  cfg.step_on_device = step_on_device;
  auto t = Make(cfg);
  SetFaultHooks(FaultHooks());
  ASSERT_EQ(t->stats_on_device(), step_on_device);
  SyntheticData data(cfg.model.image_shape, 4, 5);
  Tensor x, y;
  data.NextBatch(16, &x, &y);
  for (int step = 0; step < 2; ++step) {
    StepStats s;
    ASSERT_TRUE(t->Step(x, y, &s).ok());
    t->ReadStats(&s);
    EXPECT_EQ(s.skipped_steps, 0);
  }
  Tensor before = testing::ToHostF32(t->replica(0).Parameters()[0]->value);
  StepStats s;
  ASSERT_TRUE(t->Step(x, y, &s).ok());
  t->ReadStats(&s);
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_EQ(t->last_skip() != nullptr, !step_on_device);
  EXPECT_EQ(t->loss_scaler().scale(), 32768.0f);
  EXPECT_EQ(t->loss_scaler().overflows(), 1);
  EXPECT_EQ(testing::RelativeError(t->replica(0).Parameters()[0]->value, before), 0.0);
  ASSERT_TRUE(t->Step(x, y, &s).ok());
  EXPECT_GT(testing::RelativeError(t->replica(0).Parameters()[0]->value, before), 0.0) << "the next step updates";
}

TEST(CudaTrainerTest, OverflowSkipsTheStepAndHalvesTheScale) {
  TALLY_REQUIRE_GPU();
  ExpectOverflowSkipsTheStep(/*step_on_device=*/true);
}

TEST(CudaTrainerTest, OverflowSkipsTheStepWhenTheStepWaits) {
  TALLY_REQUIRE_GPU();
  ExpectOverflowSkipsTheStep(/*step_on_device=*/false);
}

// The step kept on the device, queued or replayed from a CUDA graph, trains as the step that
// waits for its loss and finite check: the same weights (the same kernels, in the same
// order), the same loss and accuracy counts; replays make no cudaMalloc.
TEST(CudaTrainerTest, DeviceStepAndItsGraphMatchTheWaitingStep) {
  TALLY_REQUIRE_GPU();
  SetAllowTf32(false);
  SetDeterministic(true);
  TrainerConfig waiting = SmallConfig(), queued = SmallConfig(), graphed = SmallConfig();
  for (TrainerConfig* c : {&waiting, &queued, &graphed}) {
    c->gpus = {0};
    c->dtype = DType::kF16;
  }
  waiting.step_on_device = false;
  queued.cuda_graph = false;
  auto a = Make(waiting), b = Make(queued), c = Make(graphed);
  ASSERT_FALSE(a->stats_on_device());
  ASSERT_TRUE(b->stats_on_device());
  SyntheticData data(waiting.model.image_shape, 4, 5);
  StepStats sa, sb, sc;
  int64_t mallocs = -1;
  for (int step = 0; step < 6; ++step) {
    Tensor x, y;
    data.NextBatch(16, &x, &y);
    ASSERT_TRUE(a->Step(x, y, &sa).ok());
    ASSERT_TRUE(b->Step(x, y, &sb).ok());
    ASSERT_TRUE(c->Step(x, y, &sc).ok());
    if (step == 3) {
      Synchronize(testing::Gpu());
      mallocs = GetDeviceMemoryStats(0).device_mallocs;
    }
  }
  b->ReadStats(&sb);
  c->ReadStats(&sc);
  SetDeterministic(false);
  EXPECT_FALSE(b->replaying_graph());
  EXPECT_TRUE(c->replaying_graph());
  EXPECT_EQ(GetDeviceMemoryStats(0).device_mallocs, mallocs) << "steps 4 and 5 allocated device memory";
  EXPECT_EQ(sb.samples, sa.samples);
  EXPECT_NEAR(sb.loss_sum, sa.loss_sum, 1e-5 * sa.loss_sum);
  EXPECT_EQ(sc.loss_sum, sb.loss_sum);
  EXPECT_EQ(sb.correct, sa.correct);
  EXPECT_EQ(sb.topk_correct, sa.topk_correct);
  EXPECT_EQ(sc.correct, sb.correct);
  const auto& pa = a->replica(0).Parameters();
  const auto& pb = b->replica(0).Parameters();
  const auto& pc = c->replica(0).Parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(testing::RelativeError(pb[i]->value, pa[i]->value), 0.0) << pa[i]->name;
    EXPECT_EQ(testing::RelativeError(pc[i]->value, pb[i]->value), 0.0) << pa[i]->name;
  }
}

// A batch of another shape (an epoch's short last batch) runs queued once, then is recorded
// again; going back to the first shape does the same. Every step trains as a step that is
// never recorded does (same weights, same figures).
TEST(CudaTrainerTest, AnotherBatchShapeIsRecordedAgain) {
  TALLY_REQUIRE_GPU();
  SetDeterministic(true);
  TrainerConfig cfg = SmallConfig(), queued_cfg;
  cfg.gpus = {0};
  cfg.dtype = DType::kBF16;
  queued_cfg = cfg;
  queued_cfg.cuda_graph = false;
  auto t = Make(cfg), queued = Make(queued_cfg);
  SyntheticData data(cfg.model.image_shape, 4, 5);
  const std::vector<std::pair<int, bool>> steps = {{16, false}, {16, true}, {16, true}, {8, false},
                                                   {8, true},   {16, false}, {16, true}};
  StepStats got, want;
  for (size_t i = 0; i < steps.size(); ++i) {
    Tensor x, y;
    data.NextBatch(steps[i].first, &x, &y);
    ASSERT_TRUE(t->Step(x, y, &got).ok()) << "step " << i;
    ASSERT_TRUE(queued->Step(x, y, &want).ok()) << "step " << i;
    EXPECT_EQ(t->replaying_graph(), steps[i].second) << "step " << i;
  }
  t->ReadStats(&got);
  queued->ReadStats(&want);
  SetDeterministic(false);
  EXPECT_EQ(got.samples, 16 * 5 + 8 * 2);
  EXPECT_EQ(got.samples, want.samples);
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  EXPECT_EQ(got.correct, want.correct);
  const auto& pg = t->replica(0).Parameters();
  const auto& pq = queued->replica(0).Parameters();
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(testing::RelativeError(pg[i]->value, pq[i]->value), 0.0) << pg[i]->name;
  }
}

}  // namespace
}  // namespace tally
