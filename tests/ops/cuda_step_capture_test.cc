// The device-resident step ops (ops/ops.h) queue without waiting for the GPU: a whole step's
// worth of them (loss and accuracy accumulated, the overflow flag, the SGD update reading
// lr, loss scale and flag from the device, the loss scale's update) is captured into a CUDA
// graph, which fails on any wait or host read-back of the stream. The graph, replayed, gives
// the same bits as the ops called directly, on clean steps and on a step with an overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ops/device.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "tests/ops/cuda_compare.h"

#ifdef TALLY_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/context.h"
#endif

namespace tally {
namespace {

using testing::Gpu;
using testing::RandomTensor;
using testing::ToDevice;

// One replica's training state and its step figures, all on cuda:0.
struct StepState {
  Tensor logits, labels, dlogits, loss_sum, count, scale, loss_state, found, lr;
  std::vector<SgdSlot> slots;

  StepState Clone() const {
    StepState c = *this;
    for (Tensor* t : {&c.dlogits, &c.loss_sum, &c.count, &c.scale, &c.loss_state, &c.found}) {
      *t = t->Clone();
    }
    for (SgdSlot& s : c.slots) {
      s.grad = s.grad.Clone();  // each state's gradients, so that one may overflow alone
      s.weight = s.weight.Clone();
      if (s.master.defined()) s.master = s.master.Clone();
      if (s.mom.defined()) s.mom = s.mom.Clone();
    }
    return c;
  }

  std::vector<Tensor> Grads() const {
    std::vector<Tensor> g;
    for (const SgdSlot& s : slots) g.push_back(s.grad);
    return g;
  }

  // Everything a step writes, as host bytes.
  std::vector<Tensor> Outputs() const {
    std::vector<Tensor> out = {dlogits, loss_sum, count, scale, loss_state, found};
    for (const SgdSlot& s : slots) {
      out.push_back(s.weight);
      if (s.master.defined()) out.push_back(s.master);
      if (s.mom.defined()) out.push_back(s.mom);
    }
    for (Tensor& t : out) {
      Tensor h = Tensor::Empty(t.shape(), t.dtype());
      h.CopyFrom(t);
      t = h;
    }
    return out;
  }
};

StepState MakeState() {
  Rng rng(1);
  StepState s;
  const int64_t n = 32, classes = 1000;
  s.logits = ToDevice(RandomTensor({n, classes}, &rng, -4.0f, 4.0f), DType::kF16);
  Tensor labels = Tensor::Empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng.Below(1000));
  s.labels = ToDevice(labels, DType::kI32);
  s.dlogits = Tensor::Empty({n, classes}, DType::kF16, Gpu());
  s.loss_sum = Tensor::Zeros({2}, DType::kF32, Gpu());
  s.count = Tensor::Zeros({1}, DType::kI32, Gpu());
  s.scale = Tensor::Empty({1}, DType::kF32, Gpu());
  s.scale.Fill(65536.0f);
  s.loss_state = Tensor::Zeros({2}, DType::kI32, Gpu());
  s.found = Tensor::Zeros({1}, DType::kI32, Gpu());
  s.lr = Tensor::Empty({1}, DType::kF32, Gpu());
  s.lr.Fill(0.05f);
  for (int i = 0; i < 6; ++i) {
    SgdSlot slot;
    const int64_t size = 1000 + 4096 * i;
    const Tensor w = RandomTensor({size}, &rng);
    if (i % 2 == 0) {
      slot.weight = ToDevice(w, DType::kF16);
      slot.master = ToDevice(w, DType::kF32);
    } else {
      slot.weight = ToDevice(w, DType::kF32);
    }
    slot.grad = ToDevice(RandomTensor({size}, &rng, -1000.0f, 1000.0f), slot.weight.dtype());
    slot.mom = Tensor::Zeros({size}, DType::kF32, Gpu());
    s.slots.push_back(slot);
  }
  return s;
}

// A training step's figures and update, none of which waits for the GPU.
void Step(StepState* s) {
  SgdParams p;
  p.momentum = 0.9f;
  p.wd = 1e-4f;
  LossScaleParams lp;
  lp.window = 2;
  SoftmaxCrossEntropyAccumulate(s->logits, s->labels, 0.1f, 1.0f / 32, &s->scale, &s->dlogits,
                                &s->loss_sum);
  TopKCorrectAccumulate(s->logits, s->labels, 5, &s->count);
  NonFiniteFlag(s->Grads(), &s->found);
  SgdStepScalars scalars;
  scalars.lr = s->lr;
  scalars.grad_scale = s->scale;
  scalars.found = s->found;
  MultiSgdUpdate(p, s->slots, scalars);
  LossScaleUpdate(lp, s->found, &s->scale, &s->loss_state);
}

void ExpectSameBytes(const std::string& what, const StepState& got, const StepState& want) {
  const std::vector<Tensor> g = got.Outputs(), w = want.Outputs();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(g[i].raw_data(), w[i].raw_data(), w[i].nbytes()))
        << what << ": output " << i << " " << w[i].ToString();
  }
}

void PoisonFirstGradient(StepState* s) {
  Tensor g = Tensor::Empty(s->slots[0].grad.shape(), DType::kF32);
  g.CopyFrom(s->slots[0].grad);
  g.data<float>()[17] = std::numeric_limits<float>::infinity();
  s->slots[0].grad.CopyFrom(g);
}

#ifdef TALLY_HAVE_CUDA
// Captures what `fn` queues on cuda:0's stream into a graph, and instantiates it; the
// capture fails (a CUDA error) if fn waits for the stream or copies back from it.
cudaGraphExec_t Capture(const std::function<void()>& fn) {
  const cudaStream_t stream = cuda::Context(Gpu()).stream;
  Synchronize(Gpu());
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
  fn();
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  return exec;
}

void Replay(cudaGraphExec_t exec) {
  EXPECT_EQ(cudaGraphLaunch(exec, cuda::Context(Gpu()).stream), cudaSuccess);
}
#endif

TEST(CudaStepCaptureTest, AStepOfDeviceOpsIsCapturedAndReplayed) {
  TALLY_REQUIRE_GPU();
#ifdef TALLY_HAVE_CUDA
  StepState direct = MakeState();
  StepState replayed = direct.Clone();
  Step(&direct);  // the first step fills the allocator's cache for the captured one
  cudaGraphExec_t exec = Capture([&] { Step(&replayed); });
  ASSERT_NE(exec, nullptr);
  Replay(exec);
  Step(&direct);  // window 2: the scale doubles on this step
  Replay(exec);
  Synchronize(Gpu());
  ExpectSameBytes("two clean steps", replayed, direct);

  PoisonFirstGradient(&direct);
  PoisonFirstGradient(&replayed);
  const std::vector<Tensor> before = direct.Outputs();
  Step(&direct);
  Replay(exec);
  Synchronize(Gpu());
  ExpectSameBytes("a step with an overflow", replayed, direct);
  // The overflowed step changed no weight, master or momentum (outputs 6 on), and halved
  // the scale.
  const std::vector<Tensor> after = direct.Outputs();
  for (size_t i = 6; i < after.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(after[i].raw_data(), before[i].raw_data(), after[i].nbytes()))
        << "output " << i << " " << after[i].ToString();
  }
  EXPECT_EQ(after[3].data<float>()[0], before[3].data<float>()[0] * 0.5f);
  EXPECT_EQ(after[5].data<int32_t>()[0], 1) << "found";
  EXPECT_EQ(after[4].data<int32_t>()[1], 1) << "skipped steps";
  EXPECT_EQ(after[2].data<int32_t>()[0], 3 * before[2].data<int32_t>()[0] / 2) << "top-5 count";
  EXPECT_TRUE(std::isfinite(after[1].data<float>()[0]));
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
#endif
}

}  // namespace
}  // namespace tally
