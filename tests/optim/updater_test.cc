#include "optim/updater.h"

#include <cstring>

#include <gtest/gtest.h>

namespace tally {
namespace {

Tensor Full(const Shape& s, float v, DType t = DType::kF32) {
  Tensor x = Tensor::Empty(s, t);
  x.Fill(v);
  return x;
}

TEST(Updater, MultiPrecisionKeepsUpdatesFp16WouldLose) {
  OptimizerConfig opt;
  opt.lr = 1.0f;
  opt.momentum = 0.0f;
  opt.wd = 0.0f;
  opt.multi_precision = true;
  Updater mp(opt);
  opt.multi_precision = false;
  Updater plain(opt);
  Tensor w_mp = Full({4}, 1.f, DType::kF16), w_plain = Full({4}, 1.f, DType::kF16);
  Tensor g = Full({4}, 1e-4f, DType::kF16);
  // Below 1 fp16 steps by 2^-11 (4.9e-4): a 1e-4 step rounds back to 1 without a master copy.
  for (int i = 0; i < 10; ++i) {
    mp.Update(0, g, &w_mp);
    plain.Update(0, g, &w_plain);
  }
  EXPECT_EQ(HalfToFloat(w_plain.data<uint16_t>()[0]), 1.0f);
  EXPECT_NEAR(HalfToFloat(w_mp.data<uint16_t>()[0]), 0.999f, 3e-4);
  EXPECT_LT(HalfToFloat(w_mp.data<uint16_t>()[0]), 1.0f);
}

// The undo copy puts back the momentum of before the update, once.
TEST(Updater, RestoreStatePutsBackTheStateSavedBeforeTheUpdateOnce) {
  OptimizerConfig opt;
  opt.lr = 0.5f;
  opt.momentum = 0.9f;
  opt.wd = 0.0f;
  Updater u(opt);
  Tensor w = Full({3}, 1.f);
  u.Update(0, Full({3}, 1.f), &w);
  const Tensor before = u.StateSlot(0, w, 0);
  u.SaveState(0, w);
  u.Update(0, Full({3}, 2.f), &w);
  EXPECT_NE(u.StateSlot(0, w, 0).data<float>()[0], before.data<float>()[0]);
  EXPECT_EQ(u.SavedStateSlot(0, 0).data<float>()[0], before.data<float>()[0]);
  ASSERT_TRUE(u.RestoreState(0));
  EXPECT_EQ(u.StateSlot(0, w, 0).data<float>()[0], before.data<float>()[0]);
  EXPECT_FALSE(u.RestoreState(0));
  EXPECT_FALSE(u.SavedStateSlot(0, 0).defined());
}

// A server's updates, cut into pieces over the worker pool, give every rule's values and
// state bit for bit as one call does (servers and their replicas must agree).
TEST(Updater, PiecesOverThePoolGiveTheSameBitsAsOneCall) {
  const int64_t n = (int64_t{1} << 20) + 12345;  // several pieces and a ragged last one
  Tensor grad = Tensor::Empty({n}, DType::kF32);
  Tensor start = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    grad.data<float>()[i] = 0.001f * static_cast<float>((i * 7919) % 2001 - 1000);
    start.data<float>()[i] = 0.01f * static_cast<float>((i * 104729) % 201 - 100);
  }
  for (const char* type : {"sgd", "nag", "adam", "rmsprop", "signum", "lars"}) {
    OptimizerConfig opt;
    opt.type = type;
    opt.lr = 0.1f;
    opt.momentum = 0.9f;
    opt.wd = 1e-4f;
    ASSERT_TRUE(ValidateOptimizerConfig(opt).ok()) << type;
    Updater whole(opt), pieces(opt);
    pieces.set_spread_over_pool(true);
    Tensor w_whole = start.Clone(), w_pieces = start.Clone();
    for (int step = 0; step < 3; ++step) {
      whole.Update(7, grad, &w_whole);
      pieces.Update(7, grad, &w_pieces);
    }
    ASSERT_EQ(0, std::memcmp(w_whole.raw_data(), w_pieces.raw_data(), w_whole.nbytes())) << type;
    const Tensor s_whole = whole.State(7, w_whole), s_pieces = pieces.State(7, w_pieces);
    ASSERT_EQ(s_whole.defined(), s_pieces.defined()) << type;
    if (s_whole.defined()) {
      EXPECT_EQ(0, std::memcmp(s_whole.raw_data(), s_pieces.raw_data(), s_whole.nbytes())) << type;
    }
  }
}

// The server's update with its undo copy (values read from one buffer, written into
// another; the state's buffers swapped) gives what SaveState and an in-place Update give,
// bit for bit, and RestoreState puts back the state of before it.
TEST(Updater, UpdateKeepingUndoIsSaveStateAndUpdateInOnePass) {
  const int64_t n = (int64_t{1} << 17) + 5;
  Tensor grad = Tensor::Empty({n}, DType::kF32);
  Tensor start = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    grad.data<float>()[i] = 0.002f * static_cast<float>((i * 7919) % 1001 - 500);
    start.data<float>()[i] = 0.01f * static_cast<float>((i * 104729) % 201 - 100);
  }
  for (const char* type : {"sgd", "nag", "adam"}) {
    OptimizerConfig opt;
    opt.type = type;
    opt.lr = 0.1f;
    opt.momentum = 0.9f;
    opt.wd = 1e-4f;
    Updater in_place(opt), two_buffers(opt);
    two_buffers.set_spread_over_pool(true);
    Tensor w = start.Clone(), a = start.Clone(), b = Tensor::Empty({n}, DType::kF32);
    for (int step = 0; step < 4; ++step) {
      const Tensor state_before = in_place.State(3, w);
      in_place.SaveState(3, w);
      in_place.Update(3, grad, &w);
      two_buffers.UpdateKeepingUndo(3, grad, a, &b);  // a: the values before, b: after
      ASSERT_EQ(0, std::memcmp(w.raw_data(), b.raw_data(), w.nbytes())) << type << " step " << step;
      const Tensor s1 = in_place.State(3, w), s2 = two_buffers.State(3, b);
      ASSERT_EQ(0, std::memcmp(s1.raw_data(), s2.raw_data(), s1.nbytes())) << type << " step " << step;
      ASSERT_EQ(0, std::memcmp(in_place.SavedStateSlot(3, 0).raw_data(), two_buffers.SavedStateSlot(3, 0).raw_data(),
                               static_cast<size_t>(n) * sizeof(float)))
          << type << " step " << step;
      if (step == 2) {  // rolled back: the state of before the update, and the values in a
        ASSERT_TRUE(two_buffers.RestoreState(3));
        const Tensor restored = two_buffers.State(3, a);
        ASSERT_EQ(0, std::memcmp(restored.raw_data(), state_before.raw_data(), restored.nbytes())) << type;
        ASSERT_TRUE(in_place.RestoreState(3));
        w = a.Clone();
        continue;
      }
      std::swap(a, b);  // the next update reads the new values; b's buffer takes the one after
    }
  }
}

TEST(OptimizerConfig, ValidationNamesTheFlag) {
  OptimizerConfig c;
  EXPECT_TRUE(ValidateOptimizerConfig(c).ok());
  c.momentum = 1.0f;
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("--mom"), std::string::npos);
  c = OptimizerConfig();
  c.type = "adamax";
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("--optimizer"), std::string::npos);
  c.type = "nag";
  const SgdParams p = ToSgdParams(c, /*gradient_scale=*/4.0f);
  EXPECT_TRUE(p.nesterov);
  EXPECT_EQ(p.rescale_grad, c.rescale_grad / 4.0f);
}

}  // namespace
}  // namespace tally
