// KVServer fed hand-made messages: one server (node 1) and workers at nodes 2, 3, 4.
#include <gtest/gtest.h>

#include <limits>

#include "server/server.h"

namespace tally {
namespace {

constexpr int kServerId = 1;
int Worker(int rank) { return 2 + rank; }

Tensor Values(const std::vector<float>& v, DType dtype = DType::kF32) {
  Tensor f = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) f.data<float>()[i] = v[i];
  return f.To(dtype);
}

std::vector<float> Floats(const Tensor& t) {
  Tensor f = t.To(DType::kF32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

class KVServerTest : public ::testing::Test {
 protected:
  void Make(int workers) {
    server_ = std::make_unique<KVServer>(1, workers, [this](int id, Message m) {
      EXPECT_EQ(m.meta.command(), wire::RESPONSE);
      sent_.push_back({id, std::move(m)});
      return Status::Ok();
    });
  }

  Message Request(wire::Command c, int sender, int64_t step = 0) {
    Message m;
    m.meta.set_command(c);
    m.meta.set_sender_id(sender);
    m.meta.set_receiver_id(kServerId);
    m.meta.set_request_id(++next_id_);
    m.meta.set_step(step);
    m.meta.set_num_workers(workers_);
    return m;
  }
  static void AddSlice(Message* m, uint64_t key, uint64_t offset, const Tensor& data) {
    wire::KeySlice* s = m->meta.add_slices();
    s->set_key(key);
    s->set_offset(offset);
    s->set_length(static_cast<uint64_t>(data.numel()));
    m->meta.set_dtype(ToWire(data.dtype()));
    m->data.push_back(data);
  }

  // Sends m and returns the answers it caused (in order).
  std::vector<std::pair<int, Message>> Send(Message m) {
    sent_.clear();
    server_->Handle(std::move(m));
    return std::move(sent_);
  }
  // Sends m and expects exactly one answer, without an error, to its sender.
  Message Ok(Message m) {
    const uint64_t id = m.meta.request_id();
    const int sender = m.meta.sender_id();
    auto out = Send(std::move(m));
    EXPECT_EQ(out.size(), 1u);
    if (out.empty()) return Message();
    EXPECT_EQ(out[0].first, sender);
    EXPECT_EQ(out[0].second.meta.request_id(), id);
    EXPECT_EQ(out[0].second.meta.error(), "");
    return std::move(out[0].second);
  }
  // Sends m and expects one answer carrying an error that mentions `words`.
  void Refused(Message m, const std::string& words) {
    auto out = Send(std::move(m));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NE(out[0].second.meta.error().find(words), std::string::npos) << out[0].second.meta.error();
    EXPECT_TRUE(out[0].second.data.empty());
  }

  void SetOptimizer(float lr, bool async, float momentum = 0.0f) {
    Message m = Request(wire::SET_OPTIMIZER, Worker(0));
    m.meta.mutable_optimizer()->set_type("sgd");
    m.meta.mutable_optimizer()->set_lr(lr);
    m.meta.mutable_optimizer()->set_momentum(momentum);
    m.meta.mutable_optimizer()->set_rescale_grad(1.0f);
    m.meta.set_async(async);
    Ok(std::move(m));
  }
  void Init(uint64_t key, const std::vector<float>& v, bool async = false) {
    Message m = Request(wire::INIT, Worker(0), -1);
    m.meta.set_async(async);
    AddSlice(&m, key, 0, Values(v));
    Ok(std::move(m));
  }
  void Push(int rank, uint64_t key, int64_t step, const Tensor& g) {
    Message m = Request(wire::PUSH, Worker(rank), step);
    AddSlice(&m, key, 0, g);
    Ok(std::move(m));
  }
  Message PullRequest(int rank, uint64_t key, int64_t step, int64_t length, wire::DType dtype = wire::F32) {
    Message m = Request(wire::PULL, Worker(rank), step);
    wire::KeySlice* s = m.meta.add_slices();
    s->set_key(key);
    s->set_length(static_cast<uint64_t>(length));
    m.meta.set_pull_dtype(dtype);
    return m;
  }

  Message PushPullRequest(int rank, uint64_t key, int64_t step, const Tensor& g) {
    Message m = Request(wire::PUSHPULL, Worker(rank), step);
    AddSlice(&m, key, 0, g);
    m.meta.set_pull_dtype(wire::F32);
    return m;
  }
  Message RollbackRequest(int rank, uint64_t key, int64_t step, int64_t length) {
    Message m = PullRequest(rank, key, step, length);
    m.meta.set_command(wire::ROLLBACK);
    return m;
  }

  int workers_ = 2;
  uint64_t next_id_ = 0;
  std::unique_ptr<KVServer> server_;
  std::vector<std::pair<int, Message>> sent_;
};

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
  bad_optimizer.meta.mutable_optimizer()->set_type("adam");
  Refused(std::move(bad_optimizer), "adam");

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

// Duplicates (docs/wire.md): a copy of a push already counted, from the network (the same
// request id) or resent (a new one), is answered as the first was and not counted again,
// whether its step still waits for other workers or is applied already.
TEST_F(KVServerTest, ADuplicatePushCountsOnceBeforeAndAfterItsStepIsApplied) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(0, {0.f});
  Message first = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&first, 0, 0, Values({1.f}));
  Message copy = first;
  Ok(std::move(first));
  Ok(std::move(copy));
  Push(0, 0, 0, Values({100.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), -1) << "worker 0's copies stood in for worker 1";
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-3.f}));
  Push(1, 0, 0, Values({50.f}));
  Push(0, 0, 0, Values({50.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-3.f}));
  EXPECT_EQ(server_->NumDuplicates(), 4);
  Push(0, 0, 1, Values({1.f}));
  Push(1, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-5.f}));
}

// A PUSHPULL copy: while the first still waits, the one answer serves both (one answer per
// request id); once its step is applied, the same answer again; once a later step has
// changed the values, none (the first answer went out before the change).
TEST_F(KVServerTest, ADuplicatePushPullNeverGetsAnAnswerTheFirstDidNotGet) {
  Make(2);
  Init(0, {1.f, 2.f});
  Message first = PushPullRequest(0, 0, 0, Values({1.f, 1.f}));
  const uint64_t id = first.meta.request_id();
  Message copy = first;
  EXPECT_TRUE(Send(std::move(first)).empty());
  EXPECT_TRUE(Send(std::move(copy)).empty());
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  auto out = Send(PushPullRequest(1, 0, 0, Values({2.f, 2.f})));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].second.meta.request_id(), id);
  EXPECT_EQ(Floats(out[0].second.data[0]), (std::vector<float>{3.f, 3.f}));  // no optimizer: the sum
  EXPECT_EQ(out[1].first, Worker(1));

  Message late = PushPullRequest(0, 0, 0, Values({7.f, 7.f}));
  late.meta.set_request_id(id);
  Message again = Ok(std::move(late));
  EXPECT_EQ(Floats(again.data[0]), (std::vector<float>{3.f, 3.f}));
  EXPECT_FALSE(again.meta.skipped());

  Push(0, 0, 1, Values({1.f, 1.f}));
  Push(1, 0, 1, Values({1.f, 1.f}));
  Message stale = PushPullRequest(0, 0, 0, Values({7.f, 7.f}));
  stale.meta.set_request_id(id);
  EXPECT_TRUE(Send(std::move(stale)).empty());
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{2.f, 2.f}));
  EXPECT_EQ(server_->NumWaitingPulls(), 0);
  EXPECT_EQ(server_->NumDuplicates(), 3);
}

TEST_F(KVServerTest, ReorderedAndDuplicatedPushesApplyEachStepOnceInOrder) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(0, {0.f});
  // Worker 0's step 1 overtakes its step 0, and every push of worker 0 arrives twice.
  Push(0, 0, 1, Values({10.f}));
  Push(0, 0, 1, Values({10.f}));
  Push(1, 0, 1, Values({20.f}));
  Push(0, 0, 0, Values({1.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), -1);
  Push(0, 0, 0, Values({1.f}));
  Push(1, 0, 0, Values({2.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 1);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-33.f}));
  EXPECT_EQ(server_->NumDuplicates(), 2);
}

TEST_F(KVServerTest, AsyncCountsEachWorkersStepOnceWhateverTheArrivalOrder) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/true);
  Init(0, {0.f}, /*async=*/true);
  Push(0, 0, 1, Values({1.f}));  // step 1 before step 0
  Push(0, 0, 1, Values({1.f}));
  Push(0, 0, 0, Values({2.f}));
  Push(0, 0, 0, Values({2.f}));
  Push(1, 0, 0, Values({4.f}));  // worker 1's step 0 is its own
  Push(0, 0, 2, Values({8.f}));
  Push(0, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-15.f}));
  EXPECT_EQ(server_->NumDuplicates(), 3);
}

// Non-finite gradients (docs/wire.md). Step 1 of worker 1's gradient of key 1 holds a NaN:
// key 1 is not updated, and every answer of its step 1 says so, naming worker 1. Key 0 was
// updated (nobody could know yet); the workers' ROLLBACKs put its weights and momentum back,
// however many of them ask. After step 2 every value equals that of a server that was never
// sent step 1 at all.
TEST_F(KVServerTest, ANonFiniteStepIsSkippedAndRolledBackWeightsAndMomentum) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto grad = [](int rank, uint64_t key, int step) {
    return Values({0.25f * (rank + 1) + 0.5f * step + key, -0.125f * (step + 1)});
  };
  auto init = [this] {
    Make(2);
    SetOptimizer(/*lr=*/0.5f, /*async=*/false, /*momentum=*/0.9f);
    Init(0, {1.f, 2.f});
    Init(1, {3.f, -1.f});
  };

  // The reference: steps 0 and 2 only.
  init();
  for (int g : {0, 2}) {
    const int64_t t = g == 0 ? 0 : 1;
    for (uint64_t key : {0u, 1u}) {
      Push(0, key, t, grad(0, key, g));
      Push(1, key, t, grad(1, key, g));
    }
  }
  const std::vector<float> want0 = Floats(server_->Value(0, 0)), want1 = Floats(server_->Value(1, 0));

  init();
  for (uint64_t key : {0u, 1u}) {
    Push(0, key, 0, grad(0, key, 0));
    Push(1, key, 0, grad(1, key, 0));
  }
  const std::vector<float> after0 = Floats(server_->Value(0, 0)), after0_key1 = Floats(server_->Value(1, 0));
  // Step 1: key 0 is fine and is updated.
  EXPECT_TRUE(Send(PushPullRequest(0, 0, 1, grad(0, 0, 1))).empty());
  auto key0 = Send(PushPullRequest(1, 0, 1, grad(1, 0, 1)));
  ASSERT_EQ(key0.size(), 2u);
  EXPECT_FALSE(key0[1].second.meta.skipped());
  EXPECT_NE(Floats(key0[1].second.data[0]), after0);
  // Key 1: worker 1's gradient has a NaN.
  EXPECT_TRUE(Send(PushPullRequest(0, 1, 1, grad(0, 1, 1))).empty());
  Tensor bad = grad(1, 1, 1);
  bad.data<float>()[1] = nan;
  auto out = Send(PushPullRequest(1, 1, 1, bad));
  ASSERT_EQ(out.size(), 2u);
  for (const auto& [to, answer] : out) {
    EXPECT_TRUE(answer.meta.skipped()) << "to node " << to;
    ASSERT_EQ(answer.meta.nonfinite_workers_size(), 1);
    EXPECT_EQ(answer.meta.nonfinite_workers(0), 1);
    EXPECT_EQ(Floats(answer.data[0]), after0_key1);
  }
  EXPECT_EQ(server_->AppliedStep(1, 0), 1);
  for (int rank : {0, 1}) {
    for (uint64_t key : {0u, 1u}) {
      Message back = Ok(RollbackRequest(rank, key, 1, 2));
      EXPECT_TRUE(back.meta.skipped());
      EXPECT_EQ(Floats(back.data[0]), key == 0 ? after0 : after0_key1) << "worker " << rank << " key " << key;
    }
  }
  EXPECT_EQ(Floats(server_->Value(0, 0)), after0);
  // A pull of step 1 says it was skipped, too.
  EXPECT_TRUE(Ok(PullRequest(0, 0, 1, 2)).meta.skipped());
  for (uint64_t key : {0u, 1u}) {
    Push(0, key, 2, grad(0, key, 2));
    Push(1, key, 2, grad(1, key, 2));
  }
  EXPECT_EQ(Floats(server_->Value(0, 0)), want0);
  EXPECT_EQ(Floats(server_->Value(1, 0)), want1);
  EXPECT_FALSE(Ok(PullRequest(1, 0, 2, 2)).meta.skipped());
}

// A ROLLBACK may arrive before its step is applied on a slice (a worker that pulled only
// some keys): the step is skipped once its pushes are in, and the rollback is answered then.
// Only the last step applied can be undone.
TEST_F(KVServerTest, ARollbackAheadOfItsStepSkipsItOnceItsPushesAreIn) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/false);
  Init(0, {1.f});
  Push(0, 0, 0, Values({5.f}));
  Message rollback = RollbackRequest(0, 0, 0, 1);
  const uint64_t id = rollback.meta.request_id();
  EXPECT_TRUE(Send(std::move(rollback)).empty());
  EXPECT_EQ(server_->NumWaitingPulls(), 1);
  Message last = Request(wire::PUSH, Worker(1), 0);
  AddSlice(&last, 0, 0, Values({5.f}));
  auto out = Send(std::move(last));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].second.meta.request_id(), id);
  EXPECT_TRUE(out[1].second.meta.skipped());
  EXPECT_EQ(Floats(out[1].second.data[0]), (std::vector<float>{1.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
  Push(0, 0, 1, Values({1.f}));
  Push(1, 0, 1, Values({1.f}));
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-1.f}));
  Refused(RollbackRequest(1, 0, 0, 1), "only the last step");
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{-1.f}));
}

TEST_F(KVServerTest, ASumThatOverflowsIsSkippedNamingNoWorker) {
  Make(2);
  Init(0, {0.f});
  EXPECT_TRUE(Send(PushPullRequest(0, 0, 0, Values({3e38f}))).empty());
  auto out = Send(PushPullRequest(1, 0, 0, Values({3e38f})));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].second.meta.skipped());
  EXPECT_EQ(out[0].second.meta.nonfinite_workers_size(), 0);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{0.f}));
  EXPECT_EQ(server_->AppliedStep(0, 0), 0);
}

TEST_F(KVServerTest, AsyncLeavesOutANonFinitePushAndSaysSo) {
  Make(2);
  SetOptimizer(/*lr=*/1.0f, /*async=*/true);
  Init(0, {1.f, 1.f}, /*async=*/true);
  Message nan_push = Request(wire::PUSH, Worker(1), 0);
  AddSlice(&nan_push, 0, 0, Values({std::numeric_limits<float>::quiet_NaN(), 1.f}));
  Message answer = Ok(std::move(nan_push));
  EXPECT_TRUE(answer.meta.skipped());
  ASSERT_EQ(answer.meta.nonfinite_workers_size(), 1);
  EXPECT_EQ(answer.meta.nonfinite_workers(0), 1);
  EXPECT_EQ(Floats(server_->Value(0, 0)), (std::vector<float>{1.f, 1.f}));
  Message fine = Request(wire::PUSH, Worker(0), 0);
  AddSlice(&fine, 0, 0, Values({1.f, 0.5f}));
  EXPECT_FALSE(Ok(std::move(fine)).meta.skipped());
  Message inf = Ok(PushPullRequest(1, 0, 1, Values({std::numeric_limits<float>::infinity(), 0.f})));
  EXPECT_TRUE(inf.meta.skipped());
  EXPECT_EQ(Floats(inf.data[0]), (std::vector<float>{0.f, 0.5f}));
  Refused(RollbackRequest(0, 0, 1, 2), "dist_async");
}

}  // namespace
}  // namespace tally
