// The Updater against float64 references of MXNet 1.9.1's update formulas
// (tools/make_optimizer_fixtures.py): several steps of every rule, fp32 and fp16 with fp32
// master weights, weights after each step and every state slot after the last; then the
// state's round trips (State/SetState, SaveState/RestoreState) bit for bit for each rule.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optim/rules.h"
#include "optim/updater.h"

namespace tally {
namespace {

struct Fixture {
  const char* name;
  bool fp16;
  OptimizerConfig (*config)();
  std::vector<double> lrs, w0;
  std::vector<std::vector<double>> grads, weights, slots;
};

const Fixture kFixtures[] = {
#include "tests/optim/optimizer_fixtures.inc"
};

Tensor FromDoubles(const std::vector<double>& v, DType t) {
  Tensor x = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) x.data<float>()[i] = static_cast<float>(v[i]);
  return t == DType::kF32 ? x : x.To(t);
}

// fp32: a few fp32 roundings of a handful of operations. fp16: one unit in the last place
// of the fp16 result (the fp32 master may round to the neighbour of the float64 one's).
void ExpectNear(const Tensor& got, const std::vector<double>& want, bool fp16_ulp, const std::string& what) {
  const Tensor f = got.To(DType::kF32);
  ASSERT_EQ(f.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = want[i], a = f.data<float>()[i];
    const double tol = fp16_ulp ? std::ldexp(1.0, std::max(-14, std::ilogb(std::max(std::fabs(e), 1e-30))) - 10) * 1.01
                                : 1e-6 + 1e-4 * std::fabs(e);
    EXPECT_NEAR(a, e, tol) << what << " element " << i;
  }
}

void RunFixture(const Fixture& f) {
  SCOPED_TRACE(f.name);
  const OptimizerConfig c = f.config();
  ASSERT_TRUE(ValidateOptimizerConfig(c).ok()) << ValidateOptimizerConfig(c).message();
  const DType t = f.fp16 ? DType::kF16 : DType::kF32;
  Updater u(c);
  Tensor w = FromDoubles(f.w0, t);
  for (size_t s = 0; s < f.grads.size(); ++s) {
    u.set_learning_rate(static_cast<float>(f.lrs[s]));
    u.Update(7, FromDoubles(f.grads[s], t), &w);
    ExpectNear(w, f.weights[s], f.fp16, "weight after step " + std::to_string(s + 1));
  }
  ASSERT_EQ(u.state_slots(), static_cast<int>(f.slots.size()));
  for (size_t j = 0; j < f.slots.size(); ++j) {
    ExpectNear(u.StateSlot(7, w, static_cast<int>(j)), f.slots[j], false, "state slot " + std::to_string(j));
  }
}

TEST(OptimizerFixtures, EveryRuleMatchesMxnetsFormulasForSeveralSteps) {
  ASSERT_GE(sizeof(kFixtures) / sizeof(kFixtures[0]), 28u);
  for (const Fixture& f : kFixtures) RunFixture(f);
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || (a.nbytes() == b.nbytes() &&
                                                         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0));
}

// A state copied into a fresh Updater (a checkpoint, a spare server) continues bit for bit;
// RestoreState puts back exactly what SaveState saw, step count and previous lr included.
TEST(OptimizerFixtures, StateRoundTripsBitForBitForEveryRule) {
  for (const Fixture& f : kFixtures) {
    if (f.fp16) continue;
    SCOPED_TRACE(f.name);
    const OptimizerConfig c = f.config();
    Updater a(c), b(c);
    Tensor wa = FromDoubles(f.w0, DType::kF32);
    for (int s = 0; s < 2; ++s) a.Update(1, FromDoubles(f.grads[s], DType::kF32), &wa);
    Tensor wb = wa.Clone();
    ASSERT_TRUE(b.SetState(1, wb, a.State(1, wa)).ok());
    EXPECT_TRUE(SameBits(a.State(1, wa), b.State(1, wb)));
    a.SaveState(1, wa);
    const Tensor saved = a.State(1, wa);
    for (int s = 2; s < 4; ++s) {
      a.set_learning_rate(static_cast<float>(f.lrs[s]));
      b.set_learning_rate(static_cast<float>(f.lrs[s]));
      a.Update(1, FromDoubles(f.grads[s], DType::kF32), &wa);
      b.Update(1, FromDoubles(f.grads[s], DType::kF32), &wb);
    }
    EXPECT_TRUE(SameBits(wa, wb));
    EXPECT_TRUE(SameBits(a.State(1, wa), b.State(1, wb)));
    for (int j = 0; j < a.state_slots(); ++j) {
      EXPECT_TRUE(SameBits(a.SavedStateSlot(1, j), saved.Slice(j * wa.numel(), (j + 1) * wa.numel())));
    }
    ASSERT_TRUE(a.RestoreState(1));
    EXPECT_TRUE(SameBits(a.State(1, wa), saved));
  }
}

TEST(OptimizerFixtures, AStateThatDoesNotFitIsRefusedNamingTheKeyAndSlot) {
  OptimizerConfig c;
  c.type = "adam";
  Updater u(c);
  const Tensor w = FromDoubles({1, 2, 3}, DType::kF32);
  EXPECT_EQ(u.state_slots(), 3);
  Status s = u.SetState(4, w, FromDoubles({1, 2, 3}, DType::kF32));
  EXPECT_NE(s.message().find("key 4"), std::string::npos) << s.message();
  s = u.SetStateSlot(4, w, 2, FromDoubles({1.5, 1.5, 1.5}, DType::kF32));  // the step count
  EXPECT_NE(s.message().find("slot 2"), std::string::npos) << s.message();
  s = u.SetStateSlot(4, w, 2, FromDoubles({3, 3, 4}, DType::kF32));
  EXPECT_NE(s.message().find("element 2"), std::string::npos) << s.message();
  EXPECT_TRUE(u.SetStateSlot(4, w, 2, FromDoubles({3, 3, 3}, DType::kF32)).ok());
  EXPECT_EQ(u.StateSlot(4, w, 2).data<float>()[1], 3.0f);
  EXPECT_FALSE(u.SetStateSlot(4, w, 3, FromDoubles({3, 3, 3}, DType::kF32)).ok());
}

TEST(OptimizerFixtures, ABadParameterIsRefusedNamingItsFlag) {
  const std::vector<std::pair<std::string, void (*)(OptimizerConfig*)>> cases = {
      {"--beta1", [](OptimizerConfig* c) { c->beta1 = 1.0f; }},
      {"--beta2", [](OptimizerConfig* c) { c->beta2 = -0.1f; }},
      {"--epsilon", [](OptimizerConfig* c) { c->epsilon = -0.5f; }},
      {"--gamma1", [](OptimizerConfig* c) { c->gamma1 = 1.5f; }},
      {"--gamma2", [](OptimizerConfig* c) { c->gamma2 = NAN; }},
      {"--eta", [](OptimizerConfig* c) { c->eta = 0.0f; }},
      {"--wd-lh", [](OptimizerConfig* c) { c->wd_lh = -1.0f; }},
      {"--lower-bound", [](OptimizerConfig* c) { c->lower_bound = 2.0f, c->upper_bound = 1.0f; }},
      {"--rescale-grad", [](OptimizerConfig* c) { c->rescale_grad = 0.0f; }},
      {"--lr", [](OptimizerConfig* c) { c->lr = -1.0f; }},
  };
  for (const auto& [flag, spoil] : cases) {
    OptimizerConfig c;
    c.type = "lamb";
    spoil(&c);
    const Status s = ValidateOptimizerConfig(c);
    EXPECT_NE(s.message().find(flag), std::string::npos) << flag << ": " << s.message();
  }
}

// MXNet's LARS leaves its gamma, beta and bias parameters unscaled: a key set excluded
// (--wd-exclude bn,bias's keys) takes SGD's step with the plain lr; the others do not.
TEST(OptimizerFixtures, LarsGivesAnExcludedKeyThePlainLr) {
  OptimizerConfig c;
  c.type = "lars";
  c.lr = 0.5f;
  c.wd = 0.0f;
  c.eta = 0.01f;
  OptimizerConfig plain = c;
  plain.type = "sgd";
  Updater lars(c), sgd(plain);
  lars.set_key_excluded(true);
  Tensor wl = FromDoubles({0.5, -1, 2}, DType::kF32), ws = wl.Clone(), wt = wl.Clone();
  Updater trusted(c);
  for (int step = 0; step < 3; ++step) {
    const Tensor g = FromDoubles({0.25 * step + 0.1, 1, -0.5}, DType::kF32);
    lars.Update(0, g, &wl);
    sgd.Update(0, g, &ws);
    trusted.Update(0, g, &wt);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(wl.data<float>()[i], ws.data<float>()[i], 1e-6) << i;
    EXPECT_GT(std::fabs(wt.data<float>()[i] - ws.data<float>()[i]), 1e-3) << i;
  }
}

// The norms of LARS and LAMB are summed in fixed blocks: the same bits whatever the thread
// count, so a server and its replica agree.
TEST(OptimizerFixtures, SumSquaresIsExactForBlocksAndOrderFixed) {
  std::vector<float> v(100003);
  double want = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>((i % 7) - 3);
    want += static_cast<double>(v[i]) * v[i];
  }
  EXPECT_EQ(SumSquares(v.data(), static_cast<int64_t>(v.size())), want);
}

}  // namespace
}  // namespace tally
