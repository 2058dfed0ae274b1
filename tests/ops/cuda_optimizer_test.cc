// The CUDA SGD and NAG updates (ops/cuda/optimizer.cu) against the CPU reference: plain,
// multi-precision (fp16/bf16 weights, fp16/bf16 or fp32 gradients) and multi-tensor, the
// last over ResNet-50's 161 parameters with every kind of slot mixed in one call, which must
// be one kernel launch (counted by capturing the device's stream into a CUDA graph); and the
// same with the step's scalars (lr, loss scale, overflow flag) in device tensors, which the
// kernel reads itself: still one launch, and a flagged step changes nothing.
//
// Both sides apply SgdUpdateOne in the same order, but the two compilers may fuse different
// multiply-adds, so fp32 results are held to a few ulps rather than to the bit. A 16-bit
// weight must be exactly its fp32 master rounded to nearest even.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ops/backends.h"
#include "ops/device.h"
#include "base/dtype.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "tests/models/resnet50_sizes.h"
#include "tests/ops/cuda_compare.h"

#ifdef TALLY_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/context.h"
#endif

namespace tally {
namespace {

using testing::ExpectAllNear;
using testing::Gpu;
using testing::RandomTensor;
using testing::ResNet50ParameterSizes;
using testing::ToDevice;
using testing::ToDouble;
using testing::ToHostF32;

// A few ulps of values near 1, and far below the effect of any term of the update (lr = 0.1
// times wd = 1e-3 times w is 1e-4).
constexpr double kAtol = 2e-6, kRtol = 2e-6;

SgdParams Params(float momentum, bool nesterov) {
  SgdParams p;
  p.lr = 0.1f;
  p.momentum = momentum;
  p.wd = 1e-3f;
  p.rescale_grad = 0.5f;
  p.clip_gradient = 1.0f;  // gradients in [-4, 4] rescaled to [-2, 2]: half of them clip
  p.nesterov = nesterov;
  return p;
}

const SgdParams kVariants[] = {Params(0.9f, false), Params(0.0f, false), Params(0.9f, true)};

std::string Describe(const SgdParams& p) {
  return std::string(p.nesterov ? "nag" : "sgd") + " momentum " + std::to_string(p.momentum);
}

void ExpectNear(const std::string& what, const Tensor& got, const Tensor& want) {
  ExpectAllNear(what, ToHostF32(got), ToDouble(ToHostF32(want)), kAtol, kRtol);
}

// Every 16-bit weight is its master rounded to nearest even, bit for bit.
void ExpectWeightIsRoundedMaster(const std::string& what, const Tensor& weight,
                                 const Tensor& master) {
  Tensor w = Tensor::Empty(weight.shape(), weight.dtype());
  w.CopyFrom(weight);
  const Tensor m = ToHostF32(master);
  int misses = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float v = m.data<float>()[i];
    const uint16_t want = w.dtype() == DType::kF16 ? FloatToHalf(v) : FloatToBFloat16(v);
    if (w.data<uint16_t>()[i] != want && ++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: bits " << w.data<uint16_t>()[i] << ", master "
                    << v << " rounds to " << want;
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

TEST(CudaOptimizerTest, SgdMatchesCpu) {
  TALLY_REQUIRE_GPU();
  const int64_t n = 100003;
  for (const SgdParams& p : kVariants) {
    SCOPED_TRACE(Describe(p));
    Rng rng(1);
    Tensor w = RandomTensor({n}, &rng), g = RandomTensor({n}, &rng, -4, 4);
    Tensor mom = RandomTensor({n}, &rng, -0.1f, 0.1f);
    Tensor wg = ToDevice(w, DType::kF32), gg = ToDevice(g, DType::kF32);
    Tensor mg = ToDevice(mom, DType::kF32);
    const bool with_mom = p.momentum != 0.0f;
    for (int step = 0; step < 3; ++step) {
      cpu::SgdUpdate(p, g, &w, with_mom ? &mom : nullptr);
      SgdUpdate(p, gg, &wg, with_mom ? &mg : nullptr);
    }
    ExpectNear("w", wg, w);
    if (with_mom) ExpectNear("mom", mg, mom);
  }
}

TEST(CudaOptimizerTest, MultiPrecisionMatchesCpu) {
  TALLY_REQUIRE_GPU();
  const int64_t n = 70001;
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (DType grad_t : {t, DType::kF32}) {
      for (const SgdParams& p : kVariants) {
        SCOPED_TRACE(std::string(DTypeName(t)) + " weight, " + DTypeName(grad_t) + " grad, " +
                     Describe(p));
        Rng rng(2);
        Tensor master = RandomTensor({n}, &rng), weight = master.To(t);
        const Tensor grad = RandomTensor({n}, &rng, -4, 4).To(grad_t);
        Tensor mom = RandomTensor({n}, &rng, -0.1f, 0.1f);
        Tensor master_g = ToDevice(master, DType::kF32), weight_g = ToDevice(weight, t);
        Tensor mom_g = ToDevice(mom, DType::kF32);
        const Tensor grad_g = ToDevice(grad, grad_t);
        const bool with_mom = p.momentum != 0.0f;
        for (int step = 0; step < 3; ++step) {
          cpu::SgdMultiPrecisionUpdate(p, grad, &weight, &master, with_mom ? &mom : nullptr);
          SgdMultiPrecisionUpdate(p, grad_g, &weight_g, &master_g, with_mom ? &mom_g : nullptr);
        }
        ExpectNear("master", master_g, master);
        if (with_mom) ExpectNear("mom", mom_g, mom);
        ExpectWeightIsRoundedMaster("weight", weight_g, master_g);
      }
    }
  }
}

// The five kinds of slot: fp32; fp16 and bf16 weights with 16-bit or fp32 gradients.
struct SlotKind {
  DType weight, grad;
};
const SlotKind kKinds[] = {{DType::kF32, DType::kF32},
                           {DType::kF16, DType::kF16},
                           {DType::kF16, DType::kF32},
                           {DType::kBF16, DType::kBF16},
                           {DType::kBF16, DType::kF32}};

SgdSlot HostSlot(int64_t n, const SlotKind& kind, bool with_mom, float lr_mult, float wd_mult,
                 Rng* rng) {
  SgdSlot s;
  Tensor w = RandomTensor({n}, rng);
  if (kind.weight == DType::kF32) {
    s.weight = w;
  } else {
    s.master = w;
    s.weight = w.To(kind.weight);
  }
  s.grad = RandomTensor({n}, rng, -4, 4).To(kind.grad);
  if (with_mom) s.mom = RandomTensor({n}, rng, -0.1f, 0.1f);
  s.lr_mult = lr_mult;
  s.wd_mult = wd_mult;
  return s;
}

Tensor OnGpu(const Tensor& t) { return t.defined() ? ToDevice(t, t.dtype()) : Tensor(); }

SgdSlot GpuCopy(const SgdSlot& s) {
  SgdSlot g = s;
  g.grad = OnGpu(s.grad);
  g.weight = OnGpu(s.weight);
  g.master = OnGpu(s.master);
  g.mom = OnGpu(s.mom);
  return g;
}

void ExpectSlotsMatch(const std::vector<SgdSlot>& gpu, const std::vector<SgdSlot>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    const std::string slot = "slot " + std::to_string(i) + " (" + DTypeName(gpu[i].weight.dtype()) +
                             " weight, " + DTypeName(gpu[i].grad.dtype()) + " grad)";
    if (gpu[i].master.defined()) {
      ExpectNear(slot + " master", gpu[i].master, cpu[i].master);
      ExpectWeightIsRoundedMaster(slot + " weight", gpu[i].weight, gpu[i].master);
    } else {
      ExpectNear(slot + " weight", gpu[i].weight, cpu[i].weight);
    }
    if (gpu[i].mom.defined()) ExpectNear(slot + " mom", gpu[i].mom, cpu[i].mom);
  }
}

// How many kernels `fn` queues on the device's stream: its work is captured into a graph,
// counted and dropped (not run).
int KernelLaunches(const std::function<void()>& fn) {
#ifdef TALLY_HAVE_CUDA
  const cudaStream_t stream = cuda::Context(Gpu()).stream;
  Synchronize(Gpu());
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  fn();
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
  }
  EXPECT_EQ(kernels, static_cast<int>(count)) << "only kernels: no copies, no memsets";
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  return kernels;
#else
  ADD_FAILURE() << "no CUDA in this build";
  return -1;
#endif
}

// Runs two steps of MultiSgdUpdate on both devices and compares every slot; the GPU's call
// must be `launches` kernels.
void CompareMulti(const SgdParams& p, const std::vector<SgdSlot>& host, int launches) {
  std::vector<SgdSlot> cpu_slots = host, gpu_slots;
  for (const SgdSlot& s : host) gpu_slots.push_back(GpuCopy(s));
  EXPECT_EQ(KernelLaunches([&] { MultiSgdUpdate(p, gpu_slots); }), launches);
  for (int step = 0; step < 2; ++step) {
    cpu::MultiSgdUpdate(p, cpu_slots);
    MultiSgdUpdate(p, gpu_slots);
  }
  ExpectSlotsMatch(gpu_slots, cpu_slots);
}

// ResNet-50 as a trainer would hold it: every slot kind in turn, BN and bias parameters (1-D,
// the small ones) without weight decay and at twice the learning rate.
std::vector<SgdSlot> ResNet50Slots(bool with_mom, bool alternate_mom) {
  const std::vector<int64_t> sizes = ResNet50ParameterSizes();
  EXPECT_EQ(sizes.size(), 161u);
  Rng rng(3);
  std::vector<SgdSlot> slots;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool small = sizes[i] <= 2048;
    const bool mom = with_mom && (!alternate_mom || i % 2 == 0);
    slots.push_back(HostSlot(sizes[i], kKinds[i % 5], mom, small ? 2.0f : 1.0f,
                             small ? 0.0f : 1.0f, &rng));
  }
  return slots;
}

TEST(CudaOptimizerTest, MultiSgdResNet50MixedSlotsOneLaunch) {
  TALLY_REQUIRE_GPU();
  CompareMulti(Params(0.9f, false), ResNet50Slots(true, false), 1);
  CompareMulti(Params(0.9f, true), ResNet50Slots(true, false), 1);
  // Without momentum, slots may still carry a mom tensor (written as the CPU writes it).
  CompareMulti(Params(0.0f, false), ResNet50Slots(true, true), 1);
  // With momentum, a slot without mom takes a plain step (ops/ops.h), as on the CPU.
  CompareMulti(Params(0.9f, false), ResNet50Slots(true, true), 1);
  CompareMulti(Params(0.9f, true), ResNet50Slots(true, true), 1);
}

// More slots than one launch's table holds (512, ops/cuda/optimizer.cu): one launch per full
// table, empty tensors skipped.
TEST(CudaOptimizerTest, ManySlotsTakeOneLaunchPerTable) {
  TALLY_REQUIRE_GPU();
  Rng rng(4);
  std::vector<SgdSlot> slots;
  for (int i = 0; i < 1100; ++i) {
    const int64_t n = i % 97 == 0 ? 0 : 1 + (i * 37) % 300;
    slots.push_back(HostSlot(n, kKinds[i % 5], true, 1.0f + (i % 3), 1.0f, &rng));
  }
  CompareMulti(Params(0.9f, true), slots, 3);
}

TEST(CudaOptimizerTest, SecondCallAllocatesNothing) {
  TALLY_REQUIRE_GPU();
  std::vector<SgdSlot> slots;
  for (const SgdSlot& s : ResNet50Slots(true, false)) slots.push_back(GpuCopy(s));
  const SgdParams p = Params(0.9f, false);
  Tensor w = slots[0].weight, mom = slots[0].mom;
  auto step = [&] {
    MultiSgdUpdate(p, slots);
    SgdUpdate(p, slots[0].grad, &w, &mom);
    SgdMultiPrecisionUpdate(p, slots[1].grad, &slots[1].weight, &slots[1].master, &slots[1].mom);
  };
  step();
  const int64_t mallocs = GetDeviceMemoryStats(0).device_mallocs;
  step();
  Synchronize(Gpu());
  EXPECT_EQ(GetDeviceMemoryStats(0).device_mallocs, mallocs);
}

Tensor FloatScalar(float v, Device device) {
  Tensor t = Tensor::Empty({1}, DType::kF32, device);
  t.Fill(v);
  return t;
}

Tensor IntScalar(int32_t v, Device device) {
  Tensor t = Tensor::Empty({1}, DType::kI32, device);
  t.Fill(static_cast<float>(v));
  return t;
}

SgdStepScalars Scalars(float lr, float grad_scale, int32_t found, Device device) {
  SgdStepScalars s;
  s.lr = FloatScalar(lr, device);
  s.grad_scale = FloatScalar(grad_scale, device);
  s.found = IntScalar(found, device);
  return s;
}

// Every slot's weight, master and mom, bit for bit.
void ExpectSlotsUnchanged(const std::vector<SgdSlot>& gpu, const std::vector<SgdSlot>& host) {
  for (size_t i = 0; i < gpu.size(); ++i) {
    for (auto [got, want, name] : {std::make_tuple(gpu[i].weight, host[i].weight, "weight"),
                                   std::make_tuple(gpu[i].master, host[i].master, "master"),
                                   std::make_tuple(gpu[i].mom, host[i].mom, "mom")}) {
      if (!want.defined()) continue;
      Tensor h = Tensor::Empty(got.shape(), got.dtype());
      h.CopyFrom(got);
      EXPECT_EQ(0, std::memcmp(h.raw_data(), want.raw_data(), want.nbytes()))
          << "slot " << i << " " << name;
    }
  }
}

TEST(CudaOptimizerTest, MultiSgdStepScalarsMatchCpu) {
  TALLY_REQUIRE_GPU();
  for (const SgdParams& p : kVariants) {
    SCOPED_TRACE(Describe(p));
    const std::vector<SgdSlot> host = ResNet50Slots(true, true);
    std::vector<SgdSlot> cpu_slots = host, gpu_slots;
    for (const SgdSlot& s : host) gpu_slots.push_back(GpuCopy(s));
    for (SgdSlot& s : cpu_slots) {
      s.weight = s.weight.Clone();
      if (s.master.defined()) s.master = s.master.Clone();
      if (s.mom.defined()) s.mom = s.mom.Clone();
    }
    const SgdStepScalars on_cpu = Scalars(0.0375f, 128.0f, 0, Device::Cpu());
    const SgdStepScalars on_gpu = Scalars(0.0375f, 128.0f, 0, Gpu());
    EXPECT_EQ(KernelLaunches([&] { MultiSgdUpdate(p, gpu_slots, on_gpu); }), 1);
    for (int step = 0; step < 2; ++step) {
      cpu::MultiSgdUpdate(p, cpu_slots, on_cpu);
      MultiSgdUpdate(p, gpu_slots, on_gpu);
    }
    ExpectSlotsMatch(gpu_slots, cpu_slots);

    // A flagged step: nothing changes, to the bit, on either device.
    std::vector<SgdSlot> before;
    for (const SgdSlot& s : gpu_slots) {
      SgdSlot h = s;
      for (Tensor* t : {&h.weight, &h.master, &h.mom}) {
        if (!t->defined()) continue;
        Tensor c = Tensor::Empty(t->shape(), t->dtype());
        c.CopyFrom(*t);
        *t = c;
      }
      before.push_back(h);
    }
    MultiSgdUpdate(p, gpu_slots, Scalars(0.5f, 1.0f, 1, Gpu()));
    ExpectSlotsUnchanged(gpu_slots, before);
  }
}

// A slot without mom is allowed (it steps without momentum); a mom of the wrong size is not.
TEST(CudaOptimizerDeathTest, BadMomentumNamesSlot) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Rng rng(5);
  std::vector<SgdSlot> slots = {GpuCopy(HostSlot(10, kKinds[0], true, 1, 1, &rng)),
                                GpuCopy(HostSlot(10, kKinds[1], false, 1, 1, &rng))};
  slots[1].mom = Tensor::Zeros({9}, DType::kF32, Gpu());
  EXPECT_DEATH(MultiSgdUpdate(Params(0.9f, false), slots),
               "MultiSgdUpdate: slot 1: mom float32\\[9\\]@cuda:0 must be float32 with 10 "
               "elements");
  EXPECT_DEATH(SgdUpdate(Params(0.9f, false), slots[0].grad, &slots[0].weight, nullptr),
               "SgdUpdate: momentum 0.9 needs a mom tensor");
}

}  // namespace
}  // namespace tally
