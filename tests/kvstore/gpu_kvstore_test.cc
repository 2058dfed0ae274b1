// The kvstore types local and device on GPUs (kvstore/gpu_kvstore.h), held to the CPU's
// `device` store fed the same gradients: SGD with momentum and NAG in fp32 and in fp16 with
// fp32 masters, the skip of a step whose summed gradient is not finite, the gradient scale
// of dynamic loss scaling, the sum across two GPUs, checkpoints of the optimizer state and
// masters, and no cudaMalloc after the first step.
//
// Every test that needs a GPU skips visibly without one, and the two-GPU tests without two.
// The refusals of KVStore::Create on GPUs run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvstore/factories.h"
#include "kvstore/kvstore.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::RandomTensor;
using testing::RelativeError;
using testing::Rounded;
using testing::ToHostF32;

Device Cuda(int index) { return Device{Device::Kind::kCuda, index}; }

// The first `n` GPUs, at most as many as there are.
std::vector<Device> Gpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < std::min(n, CudaDeviceCount()); ++i) devices.push_back(Cuda(i));
  return devices;
}

// Keys 0..3: a convolution's weight, a bias, a scalar and a fully connected weight.
const std::vector<Shape> kShapes = {{4, 3, 3, 2}, {17}, {1}, {5, 8}};

std::vector<int> Keys() {
  std::vector<int> keys;
  for (size_t k = 0; k < kShapes.size(); ++k) keys.push_back(static_cast<int>(k));
  return keys;
}

OptimizerConfig Optimizer(const std::string& type, bool multi_precision = true) {
  OptimizerConfig c;
  c.type = type;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.wd = 1e-3f;
  c.rescale_grad = 0.5f;
  c.clip_gradient = 1.0f;  // gradients in [-4, 4] rescaled to [-2, 2]: half of them clip
  c.multi_precision = multi_precision;
  return c;
}

// The initial weights of key k, host fp32, already rounded to dtype.
Tensor InitialWeight(int key, DType dtype) {
  Rng rng(SplitMix64Hash(1000 + key));
  return Rounded(RandomTensor(kShapes[key], &rng), dtype);
}

// The gradient device d computes for key k at step s, host fp32 rounded to dtype.
Tensor Gradient(int key, int step, int device, DType dtype) {
  Rng rng(SplitMix64Hash(key * 7919 + step * 131 + device));
  return Rounded(RandomTensor(kShapes[key], &rng, -4.0f, 4.0f), dtype);
}

// One model replica per GPU: its weights and gradient buffers, as the Trainer holds them.
struct Replicas {
  std::vector<Device> devices;
  std::vector<std::vector<Tensor>> weights, grads;  // [device][key]
};

Replicas MakeReplicas(const std::vector<Device>& devices, DType dtype) {
  Replicas r;
  r.devices = devices;
  for (const Device& dev : devices) {
    std::vector<Tensor> w, g;
    for (int k : Keys()) {
      w.push_back(Tensor::Empty(kShapes[k], dtype, dev));
      w.back().CopyFrom(InitialWeight(k, dtype));
      g.push_back(Tensor::Empty(kShapes[k], dtype, dev));
    }
    r.weights.push_back(w);
    r.grads.push_back(g);
  }
  return r;
}

// KVStore::Create with one replica per entry of `devices` (KVStoreSpec::gpus).
Status CreateOnGpus(KVStoreType type, const std::vector<Device>& devices, std::unique_ptr<KVStore>* kv) {
  KVStoreSpec spec;
  spec.type = type;
  spec.gpus = devices;
  return KVStore::Create(spec, kv);
}

std::unique_ptr<KVStore> MakeGpuStore(const std::vector<Device>& devices, const OptimizerConfig& opt,
                                      const Replicas& r) {
  std::unique_ptr<KVStore> kv;
  Status s = CreateOnGpus(KVStoreType::kDevice, devices, &kv);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return nullptr;
  EXPECT_TRUE(kv->SetOptimizer(opt).ok());
  s = kv->Init(Keys(), r.weights[0]);
  EXPECT_TRUE(s.ok()) << s;
  return kv;
}

// One step: every device's gradients written from `grad(key, device)` (host fp32), pushed
// in reverse key order as a backward pass would, then WaitAll.
template <typename GradFn>
void Step(KVStore* kv, Replicas* r, GradFn grad) {
  for (int k = static_cast<int>(kShapes.size()) - 1; k >= 0; --k) {
    std::vector<Tensor> grads, weights;
    for (size_t d = 0; d < r->devices.size(); ++d) {
      r->grads[d][k].CopyFrom(grad(k, static_cast<int>(d)));
      grads.push_back(r->grads[d][k]);
      weights.push_back(r->weights[d][k]);
    }
    const Status s = kv->PushPull(k, grads, weights);
    ASSERT_TRUE(s.ok()) << s;
  }
  const Status s = kv->WaitAll();
  ASSERT_TRUE(s.ok()) << s;
}

void ExpectSameBits(const std::string& what, const Tensor& a, const Tensor& b) {
  const Tensor ha = ToHostF32(a), hb = ToHostF32(b);
  ASSERT_EQ(ha.numel(), hb.numel()) << what;
  int misses = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const float x = ha.data<float>()[i], y = hb.data<float>()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y))) && ++misses <= 3) {
      ADD_FAILURE() << what << "[" << i << "]: " << x << " vs " << y;
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

std::vector<Tensor> States(KVStore* kv) {
  std::vector<Tensor> states;
  const Status s = kv->GetOptimizerState(Keys(), &states);
  EXPECT_TRUE(s.ok()) << s;
  return states;
}

std::vector<Tensor> Masters(KVStore* kv) {
  std::vector<Tensor> masters;
  const Status s = kv->trainer_hooks()->master_weights()->GetMasterWeights(Keys(), &masters);
  EXPECT_TRUE(s.ok()) << s;
  return masters;
}

SgdParams ParamsOf(const OptimizerConfig& c) {
  SgdParams p;
  p.lr = c.lr;
  p.momentum = c.momentum;
  p.wd = c.wd;
  p.rescale_grad = c.rescale_grad;
  p.clip_gradient = c.clip_gradient;
  p.nesterov = c.type == "nag";
  return p;
}

// ---- without a GPU -------------------------------------------------------------------

TEST(GpuKVStoreTest, CreateOnGpusRefusesNamingTheFlagAndDevice) {
  std::unique_ptr<KVStore> kv;
  const Device missing = Cuda(CudaDeviceCount());  // one past the last GPU
  Status s = CreateOnGpus(KVStoreType::kDevice, {missing}, &kv);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--kv-store device"), std::string::npos) << s;
  if (!BuiltWithCuda()) {
    // The build's own refusal: every call fails, whatever it asks for.
    EXPECT_NE(s.message().find("without CUDA"), std::string::npos) << s;
    EXPECT_FALSE(CreateOnGpus(KVStoreType::kLocal, {Cuda(0)}, &kv).ok());
    return;
  }
  EXPECT_NE(s.message().find(missing.ToString()), std::string::npos) << s;

  s = CreateOnGpus(KVStoreType::kDistSync, {Cuda(0)}, &kv);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--kv-store dist_sync"), std::string::npos) << s;
  s = NewGpuKVStore(KVStoreType::kDevice, {}, &kv);  // KVStore::Create takes no GPUs for the CPU
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--gpus"), std::string::npos) << s;
  s = CreateOnGpus(KVStoreType::kLocal, {Device::Cpu()}, &kv);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--gpus gives cpu:0"), std::string::npos) << s;
  s = CreateOnGpus(KVStoreType::kDevice, {Cuda(0), Cuda(0)}, &kv);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuda:0 twice"), std::string::npos) << s;
  EXPECT_EQ(kv, nullptr);
}

// ---- one GPU against the CPU -----------------------------------------------------------

// Three steps on one GPU and on the CPU's `device` store from the same weights and
// gradients. The CPU store keeps its fp32 master private, so the masters are held to the CPU
// op it applies (SgdMultiPrecisionUpdate, or SgdUpdate on the rounded weight without
// multi_precision).
void ExpectMatchesCpu(DType dtype, const OptimizerConfig& opt) {
  const std::string what = std::string(DTypeName(dtype)) + " " + opt.type +
                           (opt.multi_precision ? "" : " without multi_precision");
  SCOPED_TRACE(what);
  Replicas gpu = MakeReplicas(Gpus(1), dtype);
  std::unique_ptr<KVStore> kv = MakeGpuStore(gpu.devices, opt, gpu);
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->type(), KVStoreType::kDevice);

  std::unique_ptr<KVStore> cpu;
  KVStoreSpec cpu_spec;
  cpu_spec.type = KVStoreType::kDevice;
  ASSERT_TRUE(KVStore::Create(cpu_spec, &cpu).ok());
  ASSERT_TRUE(cpu->SetOptimizer(opt).ok());
  std::vector<Tensor> cpu_w, master_ref, mom_ref;
  for (int k : Keys()) {
    cpu_w.push_back(InitialWeight(k, dtype).To(dtype));
    master_ref.push_back(InitialWeight(k, dtype));
    mom_ref.push_back(Tensor::Zeros(kShapes[k], DType::kF32));
  }
  ASSERT_TRUE(cpu->Init(Keys(), cpu_w).ok());

  const SgdParams p = ParamsOf(opt);
  for (int step = 0; step < 3; ++step) {
    auto grad = [&](int k, int d) { return Gradient(k, step, d, dtype); };
    Step(kv.get(), &gpu, grad);
    for (int k : Keys()) {
      ASSERT_TRUE(cpu->PushPull(k, {grad(k, 0).To(dtype)}, {cpu_w[k]}).ok());
      if (dtype != DType::kF32 && opt.multi_precision) SgdUpdate(p, grad(k, 0), &master_ref[k], &mom_ref[k]);
    }
    ASSERT_TRUE(cpu->WaitAll().ok());
  }

  const std::vector<Tensor> states = States(kv.get()), cpu_states = States(cpu.get());
  for (int k : Keys()) {
    const std::string key = "key " + std::to_string(k);
    EXPECT_LE(RelativeError(states[k], cpu_states[k]), 1e-6) << key << " momentum";
    if (dtype == DType::kF32) {
      EXPECT_LE(RelativeError(gpu.weights[0][k], cpu_w[k]), 1e-6) << key << " weight";
      continue;
    }
    // A 16-bit weight may differ from the CPU's by one rounding where the masters, equal to
    // a few ulps, straddle a rounding boundary.
    EXPECT_LE(RelativeError(gpu.weights[0][k], cpu_w[k]), 2e-3) << key << " weight";
  }
  if (dtype == DType::kF32 || !opt.multi_precision) return;
  const std::vector<Tensor> masters = Masters(kv.get());
  for (int k : Keys()) {
    EXPECT_LE(RelativeError(masters[k], master_ref[k]), 1e-6) << "key " << k << " master";
    ExpectSameBits("weight = master rounded, key " + std::to_string(k), gpu.weights[0][k],
                   Rounded(masters[k], dtype));
  }
}

TEST(GpuKVStoreTest, OneGpuMatchesTheCpuStore) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16}) {
    ExpectMatchesCpu(dtype, Optimizer("sgd"));
    ExpectMatchesCpu(dtype, Optimizer("nag"));
  }
  ExpectMatchesCpu(DType::kF16, Optimizer("sgd", /*multi_precision=*/false));
}

TEST(GpuKVStoreTest, WithoutMultiPrecisionThereAreNoMasters) {
  TALLY_REQUIRE_GPU();
  Replicas r = MakeReplicas(Gpus(1), DType::kF16);
  std::unique_ptr<KVStore> kv = MakeGpuStore(r.devices, Optimizer("sgd", false), r);
  ASSERT_NE(kv, nullptr);
  std::vector<Tensor> masters;
  const Status s = kv->trainer_hooks()->master_weights()->GetMasterWeights(Keys(), &masters);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multi_precision"), std::string::npos) << s;
}

// ---- skipped steps and the gradient scale ------------------------------------------------

// A NaN and an inf in two keys' gradients, on different devices: the step changes nothing on
// any device, TakeSkippedStep names it once, and the next step continues as if it had never
// come (checked against a store that never saw it, which also shows that every device's
// momentum was left alone).
TEST(GpuKVStoreTest, NonFiniteGradientSkipsTheStepOnEveryDevice) {
  TALLY_REQUIRE_GPU();
  const std::vector<Device> devices = Gpus(2);
  const int last = static_cast<int>(devices.size()) - 1;
  const OptimizerConfig opt = Optimizer("sgd");
  Replicas r = MakeReplicas(devices, DType::kF32), ref = MakeReplicas(devices, DType::kF32);
  std::unique_ptr<KVStore> kv = MakeGpuStore(devices, opt, r), kv_ref = MakeGpuStore(devices, opt, ref);
  ASSERT_NE(kv, nullptr);
  ASSERT_NE(kv_ref, nullptr);
  auto grad_of = [](int step) { return [step](int k, int d) { return Gradient(k, step, d, DType::kF32); }; };

  Step(kv.get(), &r, grad_of(0));
  Step(kv_ref.get(), &ref, grad_of(0));
  SkippedStep skip;
  EXPECT_FALSE(kv->trainer_hooks()->TakeSkippedStep(&skip));
  std::vector<std::vector<Tensor>> before(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int k : Keys()) before[d].push_back(ToHostF32(r.weights[d][k]));
  }
  const std::vector<Tensor> states_before = States(kv.get());

  Step(kv.get(), &r, [&](int k, int d) {
    Tensor g = Gradient(k, 1, d, DType::kF32);
    if (k == 3 && d == last) g.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    if (k == 1 && d == 0) g.data<float>()[0] = std::numeric_limits<float>::infinity();
    return g;
  });
  ASSERT_TRUE(kv->trainer_hooks()->TakeSkippedStep(&skip));
  EXPECT_EQ(skip.step, 1);
  EXPECT_EQ(skip.key, 1);
  EXPECT_FALSE(kv->trainer_hooks()->TakeSkippedStep(&skip));
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int k : Keys()) {
      ExpectSameBits("skipped step, " + devices[d].ToString() + " key " + std::to_string(k),
                     r.weights[d][k], before[d][k]);
    }
  }
  const std::vector<Tensor> states_after = States(kv.get());
  for (int k : Keys()) ExpectSameBits("momentum after the skip", states_after[k], states_before[k]);

  Step(kv.get(), &r, grad_of(2));
  Step(kv_ref.get(), &ref, grad_of(2));
  EXPECT_FALSE(kv->trainer_hooks()->TakeSkippedStep(&skip));
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int k : Keys()) {
      ExpectSameBits("after the skip, " + devices[d].ToString() + " key " + std::to_string(k),
                     r.weights[d][k], ref.weights[d][k]);
    }
  }
}

// Gradients 1024 times larger under SetGradientScale(1024) give the same bits as scale 1:
// both factors are powers of two, so the rescaled gradients are exactly equal.
TEST(GpuKVStoreTest, GradientScaleDividesThePushedGradientsBack) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const OptimizerConfig opt = Optimizer("nag");
    Replicas plain = MakeReplicas(Gpus(1), dtype), scaled = MakeReplicas(Gpus(1), dtype);
    std::unique_ptr<KVStore> kv = MakeGpuStore(plain.devices, opt, plain);
    std::unique_ptr<KVStore> kv_scaled = MakeGpuStore(scaled.devices, opt, scaled);
    ASSERT_NE(kv, nullptr);
    ASSERT_NE(kv_scaled, nullptr);
    for (float bad : {0.0f, -2.0f, std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      EXPECT_FALSE(kv_scaled->trainer_hooks()->SetGradientScale(bad).ok()) << bad;
    }
    ASSERT_TRUE(kv->trainer_hooks()->SetGradientScale(1.0f).ok());
    ASSERT_TRUE(kv_scaled->trainer_hooks()->SetGradientScale(1024.0f).ok());
    for (int step = 0; step < 2; ++step) {
      Step(kv.get(), &plain, [&](int k, int d) { return Gradient(k, step, d, dtype); });
      Step(kv_scaled.get(), &scaled, [&](int k, int d) {
        Tensor g = Gradient(k, step, d, dtype);
        for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= 1024.0f;
        return g;
      });
    }
    const std::vector<Tensor> states = States(kv.get()), scaled_states = States(kv_scaled.get());
    for (int k : Keys()) {
      ExpectSameBits("weight", scaled.weights[0][k], plain.weights[0][k]);
      ExpectSameBits("momentum", scaled_states[k], states[k]);
    }
  }
}

// ---- two GPUs ---------------------------------------------------------------------------

// Each step's update on two GPUs equals one GPU's fed the summed gradient, and both
// replicas hold the same bits.
TEST(GpuKVStoreTest, TwoGpusEqualOneGpuFedTheSum) {
  TALLY_REQUIRE_TWO_GPUS();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const OptimizerConfig opt = Optimizer("sgd");
    Replicas two = MakeReplicas({Cuda(0), Cuda(1)}, dtype), one = MakeReplicas({Cuda(0)}, dtype);
    std::unique_ptr<KVStore> kv2 = MakeGpuStore(two.devices, opt, two);
    std::unique_ptr<KVStore> kv1 = MakeGpuStore(one.devices, opt, one);
    ASSERT_NE(kv2, nullptr);
    ASSERT_NE(kv1, nullptr);
    for (int step = 0; step < 3; ++step) {
      Step(kv2.get(), &two, [&](int k, int d) { return Gradient(k, step, d, dtype); });
      std::vector<Tensor> sums;
      for (int k : Keys()) {
        sums.push_back(ToHostF32(two.grads[0][k]));  // summed in place by WaitAll
        ExpectSameBits("the sum on both GPUs", two.grads[1][k], sums[k]);
        Tensor want = Gradient(k, step, 0, dtype);
        const Tensor b = Gradient(k, step, 1, dtype);
        for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += b.data<float>()[i];
        // fp32: one addition, as on the host; 16-bit: within a rounding of the sum.
        EXPECT_LE(RelativeError(sums[k], Rounded(want, dtype)), dtype == DType::kF32 ? 1e-7 : 1e-2);
      }
      Step(kv1.get(), &one, [&](int k, int) { return sums[k]; });
    }
    for (int k : Keys()) {
      ExpectSameBits("cuda:0 vs one GPU, key " + std::to_string(k), two.weights[0][k], one.weights[0][k]);
      ExpectSameBits("cuda:1 vs cuda:0, key " + std::to_string(k), two.weights[1][k], two.weights[0][k]);
    }
  }
}

// ---- checkpoints and memory -------------------------------------------------------------

// The momentum and fp32 weights of one store, restored into a new one, continue the run bit
// for bit on every device; fp16 masters round to the weights.
TEST(GpuKVStoreTest, OptimizerStateAndMastersRoundTrip) {
  TALLY_REQUIRE_GPU();
  const std::vector<Device> devices = Gpus(2);
  const OptimizerConfig opt = Optimizer("sgd");
  auto grad_of = [](int step) { return [step](int k, int d) { return Gradient(k, step, d, DType::kF32); }; };
  Replicas a = MakeReplicas(devices, DType::kF32);
  std::unique_ptr<KVStore> kv_a = MakeGpuStore(devices, opt, a);
  ASSERT_NE(kv_a, nullptr);
  for (int step = 0; step < 2; ++step) Step(kv_a.get(), &a, grad_of(step));
  const std::vector<Tensor> states = States(kv_a.get()), masters = Masters(kv_a.get());
  for (int k : Keys()) ExpectSameBits("an fp32 master is the weight", masters[k], a.weights[0][k]);

  Replicas b = MakeReplicas(devices, DType::kF32);
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int k : Keys()) b.weights[d][k].CopyFrom(masters[k]);
  }
  std::unique_ptr<KVStore> kv_b = MakeGpuStore(devices, opt, b);
  ASSERT_NE(kv_b, nullptr);
  ASSERT_TRUE(kv_b->SetOptimizerState(Keys(), states).ok());
  const std::vector<Tensor> restored = States(kv_b.get()), restored_masters = Masters(kv_b.get());
  for (int k : Keys()) {
    ExpectSameBits("momentum restored", restored[k], states[k]);
    ExpectSameBits("master restored", restored_masters[k], masters[k]);
  }
  Step(kv_a.get(), &a, grad_of(2));
  Step(kv_b.get(), &b, grad_of(2));
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int k : Keys()) ExpectSameBits("resumed, " + devices[d].ToString(), b.weights[d][k], a.weights[d][k]);
  }

  // fp16: the masters are fp32 and round to the weights.
  Replicas h = MakeReplicas(devices, DType::kF16);
  std::unique_ptr<KVStore> kv_h = MakeGpuStore(devices, opt, h);
  ASSERT_NE(kv_h, nullptr);
  Step(kv_h.get(), &h, [](int k, int d) { return Gradient(k, 0, d, DType::kF16); });
  const std::vector<Tensor> masters16 = Masters(kv_h.get());
  for (int k : Keys()) {
    EXPECT_EQ(masters16[k].dtype(), DType::kF32);
    EXPECT_TRUE(masters16[k].device().is_cpu());
    ExpectSameBits("fp16 weight = master rounded", h.weights[0][k], Rounded(masters16[k], DType::kF16));
  }

  // Without momentum there is no state to save, and none is taken.
  OptimizerConfig plain = opt;
  plain.momentum = 0.0f;
  Replicas p = MakeReplicas(devices, DType::kF32);
  std::unique_ptr<KVStore> kv_p = MakeGpuStore(devices, plain, p);
  ASSERT_NE(kv_p, nullptr);
  for (const Tensor& s : States(kv_p.get())) EXPECT_FALSE(s.defined());
  EXPECT_TRUE(kv_p->SetOptimizerState(Keys(), std::vector<Tensor>(kShapes.size())).ok());
  EXPECT_FALSE(kv_p->SetOptimizerState(Keys(), states).ok());
}

TEST(GpuKVStoreTest, StepsAfterTheFirstMakeNoCudaMalloc) {
  TALLY_REQUIRE_GPU();
  const std::vector<Device> devices = Gpus(2);
  Replicas r = MakeReplicas(devices, DType::kF16);
  std::unique_ptr<KVStore> kv = MakeGpuStore(devices, Optimizer("nag"), r);
  ASSERT_NE(kv, nullptr);
  Step(kv.get(), &r, [](int k, int d) { return Gradient(k, 0, d, DType::kF16); });
  std::vector<int64_t> mallocs;
  for (const Device& d : devices) mallocs.push_back(GetDeviceMemoryStats(d.index).device_mallocs);
  for (int step = 1; step < 3; ++step) {
    Step(kv.get(), &r, [step](int k, int d) { return Gradient(k, step, d, DType::kF16); });
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(GetDeviceMemoryStats(devices[d].index).device_mallocs, mallocs[d]) << devices[d].ToString();
  }
}

// ---- misuse -----------------------------------------------------------------------------

TEST(GpuKVStoreTest, MisuseIsRefusedWithAStatus) {
  TALLY_REQUIRE_GPU();
  const std::vector<Device> devices = Gpus(1);
  Replicas r = MakeReplicas(devices, DType::kF32);
  std::unique_ptr<KVStore> kv;
  ASSERT_TRUE(CreateOnGpus(KVStoreType::kLocal, devices, &kv).ok());
  EXPECT_EQ(kv->type(), KVStoreType::kLocal);
  EXPECT_FALSE(kv->Init(0, r.weights[0][0]).ok());  // before SetOptimizer
  ASSERT_TRUE(kv->SetOptimizer(Optimizer("sgd")).ok());
  ASSERT_TRUE(kv->Init(Keys(), r.weights[0]).ok());
  EXPECT_FALSE(kv->SetOptimizer(Optimizer("sgd")).ok());  // after Init
  EXPECT_FALSE(kv->Init(0, r.weights[0][0]).ok());       // twice
  EXPECT_FALSE(kv->PushPull(9, {r.grads[0][0]}, {r.weights[0][0]}).ok());  // unknown key
  EXPECT_FALSE(kv->PushPull(0, {}, {}).ok());                              // no device
  EXPECT_FALSE(kv->PushPull(0, {r.grads[0][1]}, {r.weights[0][1]}).ok());  // another shape
  const Tensor host_grad = Tensor::Zeros(kShapes[0], DType::kF32);
  EXPECT_FALSE(kv->PushPull(0, {host_grad}, {r.weights[0][0]}).ok());      // not on the GPU
  const Tensor half_grad = Tensor::Zeros(kShapes[0], DType::kF16, devices[0]);
  EXPECT_FALSE(kv->PushPull(0, {half_grad}, {r.weights[0][0]}).ok());      // fp16 for fp32
  EXPECT_FALSE(kv->Push(0, {r.grads[0][0]}).ok());
  EXPECT_FALSE(kv->Pull(0, {r.weights[0][0]}).ok());

  r.grads[0][0].SetZero();
  ASSERT_TRUE(kv->PushPull(0, {r.grads[0][0]}, {r.weights[0][0]}).ok());
  EXPECT_FALSE(kv->PushPull(0, {r.grads[0][0]}, {r.weights[0][0]}).ok());  // twice in a step
  std::vector<Tensor> out;
  EXPECT_FALSE(kv->GetOptimizerState(Keys(), &out).ok());  // the step is not waited for
  EXPECT_FALSE(kv->trainer_hooks()->master_weights()->GetMasterWeights(Keys(), &out).ok());
  ASSERT_TRUE(kv->WaitAll().ok());
  EXPECT_TRUE(kv->GetOptimizerState(Keys(), &out).ok());
  const TrainerHooks::Times t = kv->trainer_hooks()->TakeTimes();
  // The update is queued inside WaitAll, not PushPull: the Trainer must not take it out of
  // the pushes' time.
  EXPECT_FALSE(t.on_caller_thread);
  EXPECT_EQ(t.pull_us, 0);
}

}  // namespace
}  // namespace tally
