// SGD and NAG against values worked out by hand (in double) for three steps, with weight
// decay, rescaling and clipping all active; the multi-precision variants, whose 16-bit
// weight must be exactly the rounded fp32 master; and MultiSgdUpdate with the step's
// scalars in tensors (SgdStepScalars).
#include <gtest/gtest.h>

#include <cstring>

#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::ExpectAllNear;

Tensor Values(const std::vector<float>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// lr 0.1, wd 0.01, rescale 0.5, clip 1; grads (0.5, 4.0) become (0.25, 1.0) after rescaling
// and clipping, every step; weights start at (1, -2) and momentum at 0.
SgdParams Params(float momentum, bool nesterov) {
  SgdParams p;
  p.lr = 0.1f;
  p.momentum = momentum;
  p.wd = 0.01f;
  p.rescale_grad = 0.5f;
  p.clip_gradient = 1.0f;
  p.nesterov = nesterov;
  return p;
}

struct Expected {
  std::vector<double> w, mom;
};

void RunThreeSteps(const SgdParams& p, bool with_mom, const std::vector<Expected>& steps) {
  Tensor w = Values({1.0f, -2.0f}), grad = Values({0.5f, 4.0f}), mom = Values({0.0f, 0.0f});
  for (size_t s = 0; s < steps.size(); ++s) {
    SgdUpdate(p, grad, &w, with_mom ? &mom : nullptr);
    ExpectAllNear("w after step " + std::to_string(s + 1), w, steps[s].w, 0, 1e-6);
    if (with_mom) ExpectAllNear("mom after step " + std::to_string(s + 1), mom, steps[s].mom, 0, 1e-5);
  }
}

// mom = 0.9 mom - lr (g + wd w); w += mom. Step 1, first weight: -0.1 * (0.25 + 0.01) = -0.026.
TEST(OptimizerTest, SgdMomentumByHand) {
  RunThreeSteps(Params(0.9f, false), true,
                {{{0.974, -2.098}, {-0.026, -0.098}},
                 {{0.924626, -2.284102}, {-0.049374, -0.186102}},
                 {{0.854264774, -2.549309698}, {-0.070361226, -0.265207698}}});
}

// w -= lr (g + wd w)
TEST(OptimizerTest, SgdWithoutMomentumByHand) {
  RunThreeSteps(Params(0.0f, false), false,
                {{{0.974, -2.098}, {}}, {{0.948026, -2.195902}, {}}, {{0.922077974, -2.293706098}, {}}});
}

// g' = g + wd w; mom = 0.9 mom + g'; w -= lr (g' + 0.9 mom). Step 1: g' = 0.26,
// w = 1 - 0.1 * (0.26 + 0.234) = 0.9506.
TEST(OptimizerTest, NesterovByHand) {
  RunThreeSteps(Params(0.9f, true), true,
                {{{0.9506, -2.1862}, {0.26, 0.98}},
                 {{0.88023386, -2.45142622}, {0.493506, 1.860138}},
                 {{0.7910874297, -2.7874396882}, {0.7029577386, 2.6496099378}}});
}

TEST(OptimizerTest, LargeArraysMatchSmallOnes) {
  // The parallel path (above the serial threshold) against element-by-element updates.
  Rng rng(1);
  const int64_t n = 100003;
  Tensor w = testing::RandomTensor({n}, &rng), g = testing::RandomTensor({n}, &rng, -4, 4);
  Tensor mom = testing::RandomTensor({n}, &rng);
  Tensor w1 = w.Clone(), mom1 = mom.Clone();
  const SgdParams p = Params(0.9f, true);
  SgdUpdate(p, g, &w, &mom);
  for (int64_t i = 0; i < n; i += 997) {
    Tensor wi = Values({w1.data<float>()[i]}), mi = Values({mom1.data<float>()[i]});
    SgdUpdate(p, Values({g.data<float>()[i]}), &wi, &mi);
    ASSERT_EQ(wi.data<float>()[0], w.data<float>()[i]) << i;
    ASSERT_EQ(mi.data<float>()[0], mom.data<float>()[i]) << i;
  }
}

void CheckMultiPrecision(DType t) {
  // fp16's 0.1 is 0.0999755859375 and bf16's is 0.10009765625: the update must use the
  // gradient as stored. lr 0.1, momentum 0.9, no decay, rescale or clip:
  // mom1 = -0.1 g, w1 = 1 - 0.1 g; mom2 = 0.9 mom1 - 0.1 g, w2 = w1 + mom2.
  const double g = t == DType::kF16 ? 0.0999755859375 : 0.10009765625;
  const uint16_t g16 = t == DType::kF16 ? FloatToHalf(0.1f) : FloatToBFloat16(0.1f);
  SgdParams p;
  p.lr = 0.1f;
  p.momentum = 0.9f;
  Tensor grad = Tensor::Empty({1}, t), weight = Tensor::Empty({1}, t);
  grad.data<uint16_t>()[0] = g16;
  Tensor master = Values({1.0f}), mom = Values({0.0f});
  double mom_want = 0.0, w_want = 1.0;
  for (int step = 1; step <= 3; ++step) {
    SgdMultiPrecisionUpdate(p, grad, &weight, &master, &mom);
    mom_want = 0.9 * mom_want - 0.1 * g;
    w_want += mom_want;
    ExpectAllNear("master step " + std::to_string(step), master, {w_want}, 0, 1e-6);
    ExpectAllNear("mom step " + std::to_string(step), mom, {mom_want}, 0, 1e-5);
    const float m = master.data<float>()[0];
    EXPECT_EQ(weight.data<uint16_t>()[0], t == DType::kF16 ? FloatToHalf(m) : FloatToBFloat16(m))
        << "the weight is the master rounded to nearest even, step " << step;
  }
  // An fp32 gradient gives the same master as the fp32 update.
  Tensor master32 = Values({1.0f, -2.0f}), w32 = Values({1.0f, -2.0f});
  Tensor weight2 = Tensor::Empty({2}, t);
  SgdMultiPrecisionUpdate(Params(0.0f, false), Values({0.5f, 4.0f}), &weight2, &master32, nullptr);
  SgdUpdate(Params(0.0f, false), Values({0.5f, 4.0f}), &w32, nullptr);
  ExpectAllNear("master from fp32 grad", master32, testing::ToDouble(w32), 0, 0);
}

TEST(OptimizerTest, MultiPrecisionHalf) { CheckMultiPrecision(DType::kF16); }
TEST(OptimizerTest, MultiPrecisionBFloat16) { CheckMultiPrecision(DType::kBF16); }

// One call over mixed slots (fp32 with and without momentum, fp16 and bf16 multi-precision,
// NAG) equals each slot updated on its own with its lr and wd multipliers, bit for bit.
TEST(OptimizerTest, MultiSgdEqualsPerTensorUpdates) {
  for (bool nesterov : {false, true}) {
    SgdParams p = Params(0.9f, nesterov);
    Rng rng(3);
    struct Spec { int64_t n; DType dtype; bool mom; float lr_mult, wd_mult; };
    const std::vector<Spec> specs = {{37, DType::kF32, true, 1.0f, 1.0f},
                                     {5, DType::kF32, false, 0.5f, 0.0f},
                                     {1000, DType::kF16, true, 2.0f, 1.0f},
                                     {64, DType::kBF16, true, 1.0f, 0.0f}};
    std::vector<SgdSlot> slots, expected;
    for (const Spec& s : specs) {
      SgdSlot a;
      Tensor w32 = testing::RandomTensor({s.n}, &rng), g32 = testing::RandomTensor({s.n}, &rng);
      a.weight = w32.To(s.dtype);
      a.grad = g32.To(s.dtype);
      if (s.dtype != DType::kF32) a.master = a.weight.To(DType::kF32);
      if (s.mom) a.mom = testing::RandomTensor({s.n}, &rng);
      a.lr_mult = s.lr_mult;
      a.wd_mult = s.wd_mult;
      SgdSlot b = a;
      b.weight = a.weight.Clone();
      if (a.master.defined()) b.master = a.master.Clone();
      if (a.mom.defined()) b.mom = a.mom.Clone();
      slots.push_back(a);
      expected.push_back(b);
    }
    for (SgdSlot& b : expected) {
      SgdParams q = p;
      if (!b.mom.defined()) q.momentum = 0.0f;
      q.lr = p.lr * b.lr_mult;
      q.wd = p.wd * b.wd_mult;
      if (b.master.defined()) {
        SgdMultiPrecisionUpdate(q, b.grad, &b.weight, &b.master, b.mom.defined() ? &b.mom : nullptr);
      } else {
        SgdUpdate(q, b.grad, &b.weight, b.mom.defined() ? &b.mom : nullptr);
      }
    }
    MultiSgdUpdate(p, slots);
    for (size_t i = 0; i < slots.size(); ++i) {
      const std::string what = "slot " + std::to_string(i) + (nesterov ? " nag" : " sgd");
      EXPECT_EQ(0, std::memcmp(slots[i].weight.raw_data(), expected[i].weight.raw_data(),
                               slots[i].weight.nbytes())) << what;
      if (slots[i].mom.defined()) {
        EXPECT_EQ(0, std::memcmp(slots[i].mom.raw_data(), expected[i].mom.raw_data(),
                                 slots[i].mom.nbytes())) << what;
      }
    }
  }
}

// Mixed slots as a trainer holds them: fp32 with and without momentum, fp16 and bf16 with
// an fp32 master.
std::vector<SgdSlot> MixedSlots(uint64_t seed) {
  Rng rng(seed);
  struct Spec { int64_t n; DType dtype; bool mom; float lr_mult, wd_mult; };
  const std::vector<Spec> specs = {{37, DType::kF32, true, 1.0f, 1.0f},
                                   {5, DType::kF32, false, 0.5f, 0.0f},
                                   {1000, DType::kF16, true, 2.0f, 1.0f},
                                   {64, DType::kBF16, true, 1.0f, 0.0f}};
  std::vector<SgdSlot> slots;
  for (const Spec& s : specs) {
    SgdSlot a;
    a.weight = testing::RandomTensor({s.n}, &rng).To(s.dtype);
    a.grad = testing::RandomTensor({s.n}, &rng, -4, 4).To(s.dtype);
    if (s.dtype != DType::kF32) a.master = a.weight.To(DType::kF32);
    if (s.mom) a.mom = testing::RandomTensor({s.n}, &rng, -0.1f, 0.1f);
    a.lr_mult = s.lr_mult;
    a.wd_mult = s.wd_mult;
    slots.push_back(a);
  }
  return slots;
}

std::vector<SgdSlot> CloneSlots(const std::vector<SgdSlot>& slots) {
  std::vector<SgdSlot> out = slots;
  for (SgdSlot& s : out) {
    s.weight = s.weight.Clone();
    if (s.master.defined()) s.master = s.master.Clone();
    if (s.mom.defined()) s.mom = s.mom.Clone();
  }
  return out;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void ExpectSlotsIdentical(const std::string& what, const std::vector<SgdSlot>& got,
                          const std::vector<SgdSlot>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string slot = what + ", slot " + std::to_string(i);
    EXPECT_TRUE(SameBytes(got[i].weight, want[i].weight)) << slot << " weight";
    if (got[i].master.defined()) {
      EXPECT_TRUE(SameBytes(got[i].master, want[i].master)) << slot << " master";
    }
    if (got[i].mom.defined()) {
      EXPECT_TRUE(SameBytes(got[i].mom, want[i].mom)) << slot << " mom";
    }
  }
}

Tensor IntScalar(int32_t v) {
  Tensor t = Tensor::Empty({1}, DType::kI32);
  t.data<int32_t>()[0] = v;
  return t;
}

// With lr, grad_scale and found = 0 in tensors, a step equals the plain call whose lr is the
// tensor's and whose rescale_grad is rescale_grad / grad_scale, bit for bit; each scalar
// alone too.
TEST(OptimizerTest, MultiSgdStepScalarsEqualThePlainCall) {
  for (bool nesterov : {false, true}) {
    const SgdParams p = Params(0.9f, nesterov);
    const float lr = 0.0375f, scale = 256.0f;
    struct Case { bool lr, scale, found; };
    for (const Case& c : {Case{true, true, true}, Case{true, false, false},
                          Case{false, true, false}, Case{false, false, true}}) {
      const std::string what = std::string(nesterov ? "nag" : "sgd") + (c.lr ? " lr" : "") +
                               (c.scale ? " grad_scale" : "") + (c.found ? " found=0" : "");
      std::vector<SgdSlot> slots = MixedSlots(4), expected = CloneSlots(slots);
      SgdStepScalars s;
      if (c.lr) s.lr = Values({lr});
      if (c.scale) s.grad_scale = Values({scale});
      if (c.found) s.found = IntScalar(0);
      SgdParams q = p;
      if (c.lr) q.lr = lr;
      if (c.scale) q.rescale_grad = p.rescale_grad / scale;
      for (int step = 0; step < 2; ++step) {
        MultiSgdUpdate(p, slots, s);
        MultiSgdUpdate(q, expected);
      }
      ExpectSlotsIdentical(what, slots, expected);
    }
  }
}

// A skipped step (found = 1) changes no weight, master or momentum, whatever the other
// scalars say; an update does change them (so the comparison can fail).
TEST(OptimizerTest, MultiSgdFoundSkipsTheStep) {
  std::vector<SgdSlot> slots = MixedSlots(5), before = CloneSlots(slots);
  SgdStepScalars s;
  s.lr = Values({0.5f});
  s.grad_scale = Values({2.0f});
  s.found = IntScalar(1);
  MultiSgdUpdate(Params(0.9f, false), slots, s);
  ExpectSlotsIdentical("skipped", slots, before);
  s.found = IntScalar(0);
  MultiSgdUpdate(Params(0.9f, false), slots, s);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_FALSE(SameBytes(slots[i].weight, before[i].weight)) << "slot " << i;
  }
}

TEST(OptimizerDeathTest, StepScalarsAreChecked) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  std::vector<SgdSlot> slots = MixedSlots(6);
  SgdStepScalars lr;
  lr.lr = Values({0.1f, 0.2f});
  EXPECT_DEATH(MultiSgdUpdate(Params(0.9f, false), slots, lr),
               "MultiSgdUpdate: lr float32\\[2\\]@cpu:0 must be float32 \\[1\\]");
  SgdStepScalars found;
  found.found = Values({0.0f});
  EXPECT_DEATH(MultiSgdUpdate(Params(0.9f, false), slots, found),
               "MultiSgdUpdate: found float32\\[1\\]@cpu:0 must be int32 \\[1\\]");
}

TEST(OptimizerDeathTest, MomentumWithoutStateNamesOp) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor w = Values({1.0f}), g = Values({1.0f});
  EXPECT_DEATH(SgdUpdate(Params(0.9f, false), g, &w, nullptr), "SgdUpdate: momentum 0.9 needs a mom tensor");
}

}  // namespace
}  // namespace tally
