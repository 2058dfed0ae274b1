// KVServer fed hand-made messages (kv_server_fixture.h): sums, steps, dtypes, pulls and
// malformed requests.
#include <gtest/gtest.h>

#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {
using namespace kv_server_test;  // NOLINT: the fixture and its helpers

TEST_F(KVServerTest, SumsPushesInRankOrderNotArrivalOrder) {
  workers_ = 3;
  Make(3);
  Init(5, {0.f, 0.f});
  // In fp32, (1e8 + -1e8) + 1 = 1 but (1 + 1e8) + -1e8 = 0: the order shows in the result.
  Push(2, 5, 0, Values({1.f, 2.f}));
  Push(0, 5, 0, Values({1e8f, 1e8f}));
  EXPECT_EQ(server_->AppliedStep(5, 0), -1);
  Push(1, 5, 0, Values({-1e8f, -1e8f}));
  EXPECT_EQ(server_->AppliedStep(5, 0), 0);
  EXPECT_EQ(Floats(server_->Value(5, 0)), (std::vector<float>{1.f, 2.f}));
}

TEST_F(KVServerTest, PullWaitsForItsStepAndIsAnsweredWhenTheLastPushArrives) {
  Make(2);
  Init(0, {1.f, 2.f, 3.f});
  Message initial = Ok(PullRequest(1, 0, -1, 3));  // step -1: the initial values, at once
  EXPECT_EQ(Floats(initial.data[0]), (std::vector<float>{1.f, 2.f, 3.f}));

  Push(0, 0, 0, Values({1.f, 1.f, 1.f}));
  Message pull = PullRequest(0, 0, 0, 3);
  const uint64_t pull_id = pull.meta.request_id();
  EXPECT_TRUE(Send(std::move(pull)).empty());
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  // The last push is answered first, then the waiting pull.
  Message push = Request(wire::PUSH, Worker(1), 0);
  AddSlice(&push, 0, 0, Values({0.5f, 0.5f, 0.5f}));
  const uint64_t push_id = push.meta.request_id();
  auto out = Send(std::move(push));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].second.meta.request_id(), push_id);
  EXPECT_EQ(out[1].first, Worker(0));
  EXPECT_EQ(out[1].second.meta.request_id(), pull_id);
  ASSERT_EQ(out[1].second.data.size(), 1u);
  EXPECT_EQ(Floats(out[1].second.data[0]), (std::vector<float>{1.5f, 1.5f, 1.5f}));  // no optimizer: the sum
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
}

TEST_F(KVServerTest, APushPullIsAnsweredOnceWithTheValuesAfterItsStep) {
  Make(2);
  Init(0, {1.f, 2.f});
  auto pushpull = [&](int rank, const Tensor& g, wire::DType dtype) {
    Message m = Request(wire::PUSHPULL, Worker(rank), 0);
    AddSlice(&m, 0, 0, g);
    m.meta.set_pull_dtype(dtype);
    return m;
  };
  // Worker 0's push is taken, but its answer waits for worker 1's push of the step.
  Message first = pushpull(0, Values({1.f, 1.f}), wire::F32);
  const uint64_t first_id = first.meta.request_id();
  EXPECT_TRUE(Send(std::move(first)).empty());
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  Message second = pushpull(1, Values({0.5f, 0.25f}, DType::kF16), wire::F16);
  const uint64_t second_id = second.meta.request_id();
  auto out = Send(std::move(second));
  ASSERT_EQ(out.size(), 2u);  // one answer per request: the waiting one, then the last
  EXPECT_EQ(out[0].first, Worker(0));
  EXPECT_EQ(out[0].second.meta.request_id(), first_id);
  ASSERT_EQ(out[0].second.data.size(), 1u);
  EXPECT_EQ(Floats(out[0].second.data[0]), (std::vector<float>{1.5f, 1.25f}));  // no optimizer: the sum
  EXPECT_EQ(out[1].first, Worker(1));
  EXPECT_EQ(out[1].second.meta.request_id(), second_id);
  EXPECT_EQ(out[1].second.meta.dtype(), wire::F16);
  ASSERT_EQ(out[1].second.data.size(), 1u);
  EXPECT_EQ(out[1].second.data[0].dtype(), DType::kF16);
  EXPECT_EQ(Floats(out[1].second.data[0]), (std::vector<float>{1.5f, 1.25f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  // A refused PUSHPULL is answered once, with the error, and changes nothing.
  Message bad = pushpull(0, Values({1.f, 1.f}), wire::F32);
  bad.meta.set_step(-1);
  Refused(std::move(bad), "negative");
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
}

// A PUSHPULL may carry slices of several keys (docs/wire.md): each is summed like a
// request of its own, and the request is answered once, when its last slice's step is
// applied, with every slice in the request's order.
TEST_F(KVServerTest, AMultiSlicePushPullIsAnsweredOnceWhenAllItsSlicesAreApplied) {
  Make(2);
  Init(0, {1.f, 2.f});
  Init(7, {3.f});
  Message both = Request(wire::PUSHPULL, Worker(0), 0);
  AddSlice(&both, 7, 0, Values({0.5f}));
  AddSlice(&both, 0, 0, Values({1.f, 1.f}));
  both.meta.set_pull_dtype(wire::F32);
  const uint64_t both_id = both.meta.request_id();
  EXPECT_TRUE(Send(std::move(both)).empty());
  // Worker 1 sends the keys apart: key 0 completes its step, but key 7 still waits.
  Message key0 = Request(wire::PUSHPULL, Worker(1), 0);
  AddSlice(&key0, 0, 0, Values({2.f, 4.f}));
  key0.meta.set_pull_dtype(wire::F32);
  Message answer0 = Ok(std::move(key0));
  ASSERT_EQ(answer0.data.size(), 1u);
  EXPECT_EQ(Floats(answer0.data[0]), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  Message key7 = Request(wire::PUSHPULL, Worker(1), 0);
  AddSlice(&key7, 7, 0, Values({0.25f}));
  key7.meta.set_pull_dtype(wire::F32);
  auto out = Send(std::move(key7));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, Worker(0));
  EXPECT_EQ(out[0].second.meta.request_id(), both_id);
  ASSERT_EQ(out[0].second.meta.slices_size(), 2);
  EXPECT_EQ(out[0].second.meta.slices(0).key(), 7u);
  EXPECT_EQ(out[0].second.meta.slices(1).key(), 0u);
  ASSERT_EQ(out[0].second.data.size(), 2u);
  EXPECT_EQ(Floats(out[0].second.data[0]), (std::vector<float>{0.75f}));
  EXPECT_EQ(Floats(out[0].second.data[1]), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(out[1].first, Worker(1));
  EXPECT_EQ(Floats(out[1].second.data[0]), (std::vector<float>{0.75f}));
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
  // One bad slice refuses the whole request: the good one is not pushed either.
  Message bad = Request(wire::PUSHPULL, Worker(0), 1);
  AddSlice(&bad, 0, 0, Values({1.f, 1.f}));
  AddSlice(&bad, 9, 0, Values({1.f}));
  bad.meta.set_pull_dtype(wire::F32);
  Refused(std::move(bad), "key 9");
  Message retry = Request(wire::PUSH, Worker(0), 1);
  AddSlice(&retry, 0, 0, Values({1.f, 1.f}));
  Ok(std::move(retry));
}

TEST_F(KVServerTest, Fp16PushesUpdateAnFp32MasterAndPullsComeInTheAskedDtype) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(3, {1.f, -2.f});
  // Each step moves the weights by 2e-4, below fp16's resolution near 1 (4.9e-4): only an
  // fp32 master accumulates the steps.
  const Tensor g = Values({1e-4f, -1e-4f}, DType::kF16);
  const float g32 = HalfToFloat(g.data<uint16_t>()[0]);
  float w0 = 1.f, w1 = -2.f;
  for (int step = 0; step < 10; ++step) {
    Push(0, 3, step, g);
    Push(1, 3, step, g);
    w0 -= 1.0f * (g32 + g32);
    w1 -= 1.0f * (-g32 + -g32);
  }
  EXPECT_EQ(Floats(server_->Value(3, 0)), (std::vector<float>{w0, w1}));
  EXPECT_LT(w0, 0.9985f);
  Message half = Ok(PullRequest(0, 3, 9, 2, wire::F16));
  EXPECT_EQ(half.meta.dtype(), wire::F16);
  ASSERT_EQ(half.data[0].dtype(), DType::kF16);
  EXPECT_EQ(half.data[0].data<uint16_t>()[0], FloatToHalf(w0));
  Message bf = Ok(PullRequest(1, 3, 9, 2, wire::BF16));
  EXPECT_EQ(bf.data[0].data<uint16_t>()[1], FloatToBFloat16(w1));
}

TEST_F(KVServerTest, AsyncAppliesEveryPushAtOnceAndNeverHoldsAPull) {
  Make(2);
  SetOptimizer(/*lr=*/0.5f, /*async=*/true);
  Init(1, {4.f}, /*async=*/true);
  Push(1, 1, 0, Values({2.f}));
  EXPECT_EQ(Floats(server_->Value(1, 0)), (std::vector<float>{3.f}));
  Push(1, 1, 1, Values({2.f}, DType::kBF16));
  EXPECT_EQ(Floats(server_->Value(1, 0)), (std::vector<float>{2.f}));
  Message pull = Ok(PullRequest(0, 1, 5, 1));  // a step nobody pushed: answered anyway
  EXPECT_EQ(Floats(pull.data[0]), (std::vector<float>{2.f}));
}

TEST_F(KVServerTest, LearningRateAppliesFromItsStepEvenWhenOlderPushesAreMissing) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, false);
  Init(0, {0.f});
  Push(0, 0, 0, Values({1.f}));
  // Worker 0 moves on: lr 0.5 from step 1, while worker 1's step 0 is still to come.
  Message lr = Request(wire::SET_LR, Worker(0), 1);
  lr.meta.set_lr(0.5f);
  Ok(std::move(lr));
  Push(1, 0, 0, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-2.f}));  // lr 1 at step 0
  Push(0, 0, 1, Values({1.f}));
  Push(1, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-3.f}));  // lr 0.5 at step 1
}

TEST_F(KVServerTest, PushesAheadOfTheirStepWaitAndApplyInStepOrder) {
  Make(2);
  Init(0, {0.f});
  Push(0, 0, 0, Values({1.f}));
  Push(0, 0, 1, Values({10.f}));
  Push(1, 0, 1, Values({20.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), -1);
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 1);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{30.f}));
}

TEST_F(KVServerTest, AnFp32PullKeepsItsValuesWhenTheNextUpdateComes) {
  Make(1);
  workers_ = 1;
  Init(0, {1.f, 2.f});
  Message pulled = Ok(PullRequest(0, 0, -1, 2));
  Push(0, 0, 0, Values({7.f, 8.f}));
  EXPECT_EQ(Floats(pulled.data[0]), (std::vector<float>{1.f, 2.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{7.f, 8.f}));
}

TEST_F(KVServerTest, AGradientBufferSharedWithTheSenderIsCopiedBeforeTheAnswer) {
  Make(2);
  Init(0, {0.f});
  Tensor g = Values({1.f});
  Push(0, 0, 0, g);
  g.Fill(100.f);  // the worker reuses its buffer once the push is answered
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{3.f}));
}

TEST_F(KVServerTest, MalformedRequestsAreAnsweredWithErrorsAndChangeNothing) {
  Make(2);
  SetOptimizer(1.0f, false);
  Init(0, {1.f, 2.f});

  Message unknown = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&unknown, 9, 0, Values({1.f, 1.f}));
  Refused(std::move(unknown), "key 9");

  Message wrong_length = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&wrong_length, 0, 0, Values({1.f, 1.f, 1.f}));
  Refused(std::move(wrong_length), "2 elements here");

  Message from_server = Request(wire::PUSH, 1, 0);
  AddSlice(&from_server, 0, 0, Values({1.f, 1.f}));
  Refused(std::move(from_server), "not a worker");

  Message from_stranger = Request(wire::PUSH, 9, 0);
  AddSlice(&from_stranger, 0, 0, Values({1.f, 1.f}));
  Refused(std::move(from_stranger), "not a worker");

  Message frame_dtype = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&frame_dtype, 0, 0, Values({1.f, 1.f}, DType::kF16));
  frame_dtype.meta.set_dtype(wire::F32);
  Refused(std::move(frame_dtype), "data frame 0");

  Message missing_frame = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&missing_frame, 0, 0, Values({1.f, 1.f}));
  missing_frame.data.clear();
  Refused(std::move(missing_frame), "data frames");

  Message negative_step = Request(wire::PUSH, Worker(0), -1);
  AddSlice(&negative_step, 0, 0, Values({1.f, 1.f}));
  Refused(std::move(negative_step), "negative");

  Message init_by_worker1 = Request(wire::INIT, Worker(1), -1);
  AddSlice(&init_by_worker1, 4, 0, Values({1.f}));
  Refused(std::move(init_by_worker1), "only worker 0");

  Message init_twice = Request(wire::INIT, Worker(0), -1);
  AddSlice(&init_twice, 0, 0, Values({1.f, 1.f}));
  Refused(std::move(init_twice), "initialised twice");

  Message bad_dtype = PullRequest(0, 0, 0, 2);
  bad_dtype.meta.set_pull_dtype(static_cast<wire::DType>(7));
  Refused(std::move(bad_dtype), "dtype");

  Message bad_optimizer = Request(wire::SET_OPTIMIZER, Worker(0));
  bad_optimizer.meta.mutable_optimizer()->set_type("adamax");
  Refused(std::move(bad_optimizer), "adamax");

  Message bad_lr = Request(wire::SET_LR, Worker(0), 0);
  bad_lr.meta.set_lr(-1.f);
  Refused(std::move(bad_lr), "lr");

  Message not_data = Request(wire::BARRIER, Worker(0));
  Refused(std::move(not_data), "not a data command");

  Push(0, 0, 0, Values({1.f, 1.f}));
  Push(1, 0, 0, Values({1.f, 1.f}));

  Message rollback_of_nothing = Request(wire::ROLLBACK, Worker(0), -1);
  AddSlice(&rollback_of_nothing, 0, 0, Values({0.f, 0.f}));
  rollback_of_nothing.data.clear();
  Refused(std::move(rollback_of_nothing), "negative");

  Message late_optimizer = Request(wire::SET_OPTIMIZER, Worker(0));
  late_optimizer.meta.mutable_optimizer()->set_type("sgd");
  Refused(std::move(late_optimizer), "after the first push");

  // Only the two good pushes count: w = [1, 2] - lr * (1 + 1).
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-1.f, 0.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  // An answer sent to a server is logged and dropped, not answered.
  EXPECT_TRUE(Send(Request(wire::RESPONSE, Worker(0))).empty());
}

// --wd-exclude: SET_OPTIMIZER's no_wd_keys go without weight decay, each slice looked up by its
// key; a negative key is refused.
TEST_F(KVServerTest, NoWdKeysTrainWithoutWeightDecay) {
  Make(2);
  Message bad = Request(wire::SET_OPTIMIZER, Worker(0));
  bad.meta.mutable_optimizer()->set_type("sgd");
  bad.meta.mutable_optimizer()->set_rescale_grad(1.f);
  bad.meta.mutable_optimizer()->add_no_wd_keys(-3);
  Refused(std::move(bad), "no_wd_keys holds key -3");

  Message m = Request(wire::SET_OPTIMIZER, Worker(0));
  m.meta.mutable_optimizer()->set_type("sgd");
  m.meta.mutable_optimizer()->set_lr(1.f);
  m.meta.mutable_optimizer()->set_wd(0.5f);
  m.meta.mutable_optimizer()->set_rescale_grad(1.f);
  m.meta.mutable_optimizer()->add_no_wd_keys(0);
  Ok(std::move(m));
  Init(0, {1.f, 2.f});
  Init(1, {1.f, 2.f});
  for (uint64_t key : {0, 1}) {
    Push(0, key, 0, Values({0.f, 0.f}));
    Push(1, key, 0, Values({0.f, 0.f}));
  }
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{1.f, 2.f}));   // excluded
  EXPECT_EQ(Floats(server_->Value(1, 0)), (std::vector<float>{0.5f, 1.f}));  // w - lr * wd * w
}

// Duplicates (docs/wire.md): a copy of a push already counted, from the network (the same
// request id) or resent (a new one), is answered as the first was and not counted again,
// whether its step still waits for other workers or is applied already.

}  // namespace
}  // namespace tally
