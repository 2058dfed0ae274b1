// ServerCore (server/server_core.h) alone, without the layer of fault tolerance around it:
// the plain synchronous step (pushes summed in rank order, the update, the pulls answered
// once it is applied), dist_async, a layer's hooks deciding what a plain server does not,
// and the layer's commands refused by the core.
#include "server/server_core.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {

using kv_server_test::AddKeySlice;
using kv_server_test::Floats;
using kv_server_test::Values;
using kv_server_test::Worker;

class ServerCoreTest : public ::testing::Test {
 protected:
  void Make(CoreHooks* hooks = nullptr) {
    core_ = std::make_unique<ServerCore>(NodeIds{1, 2}, [this](int id, Message m) {
      sent_.push_back({id, std::move(m)});
      return Status::Ok();
    }, hooks);
  }
  Message Request(wire::Command c, int rank, int64_t step) {
    Message m;
    m.meta.set_command(c);
    m.meta.set_sender_id(Worker(rank));
    m.meta.set_receiver_id(1);
    m.meta.set_request_id(++next_id_);
    m.meta.set_step(step);
    m.meta.set_num_workers(2);
    m.meta.set_pull_dtype(wire::F32);
    return m;
  }
  // Sends m; returns what the core sent because of it.
  kv_server_test::Sent Send(Message m) {
    sent_.clear();
    core_->Handle(std::move(m));
    return std::move(sent_);
  }
  void Start(bool async) {
    Message opt = Request(wire::SET_OPTIMIZER, 0, 0);
    opt.meta.mutable_optimizer()->set_type("sgd");
    opt.meta.mutable_optimizer()->set_lr(0.5f);
    opt.meta.mutable_optimizer()->set_rescale_grad(1.0f);
    opt.meta.set_async(async);
    ASSERT_EQ(Send(std::move(opt)).size(), 1u);
    Message init = Request(wire::INIT, 0, -1);
    init.meta.set_async(async);
    AddKeySlice(&init, 7, Values({1.f, 2.f}));
    ASSERT_EQ(Send(std::move(init)).size(), 1u);
  }
  Message Push(wire::Command c, int rank, int64_t step, const std::vector<float>& g) {
    Message m = Request(c, rank, step);
    AddKeySlice(&m, 7, Values(g));
    return m;
  }

  uint64_t next_id_ = 0;
  std::unique_ptr<ServerCore> core_;
  kv_server_test::Sent sent_;
};

TEST_F(ServerCoreTest, APullOfAStepIsAnsweredOnceEveryWorkersPushIsSummedAndApplied) {
  Make();
  Start(/*async=*/false);
  EXPECT_TRUE(Send(Push(wire::PUSHPULL, 1, 0, {2.f, 4.f})).empty());  // waits for worker 0
  EXPECT_EQ(core_->NumWaitingPulls(), 1);
  kv_server_test::Sent out = Send(Push(wire::PUSHPULL, 0, 0, {0.f, 2.f}));
  ASSERT_EQ(out.size(), 2u);  // both pulls, the sum (2, 6) applied with lr 0.5
  for (auto& [to, m] : out) {
    EXPECT_EQ(m.meta.error(), "");
    EXPECT_EQ(Floats(m.data[0]), (std::vector<float>{0.f, -1.f})) << "to node " << to;
  }
  EXPECT_EQ(core_->Find(7, 0)->applied, 0);
  EXPECT_EQ(core_->NumWaitingPulls(), 0);
}

TEST_F(ServerCoreTest, AnAsyncPushIsAppliedWhenItComes) {
  Make();
  Start(/*async=*/true);
  kv_server_test::Sent out = Send(Push(wire::PUSHPULL, 1, 0, {2.f, 2.f}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Floats(out[0].second.data[0]), (std::vector<float>{0.f, 1.f}));
}

// A layer's hooks: a gradient scale of its own, and an update it keeps something of first.
class HalvingLayer : public CoreHooks {
 public:
  float GradientScale(int64_t, float scale) const override { return scale * 2.0f; }
  Tensor BeforeUpdate(ServerSlice* s, int64_t step) override {
    before.push_back({s->key, step});
    return Tensor();  // the update in place
  }
  std::vector<std::pair<uint64_t, int64_t>> before;
};

TEST_F(ServerCoreTest, TheLayersHooksChangeTheStepAndTheLayersCommandsAreNotTheCores) {
  HalvingLayer layer;
  Make(&layer);
  Start(/*async=*/false);
  Send(Push(wire::PUSH, 0, 0, {2.f, 2.f}));
  Send(Push(wire::PUSH, 1, 0, {2.f, 2.f}));
  EXPECT_EQ(Floats(core_->Find(7, 0)->value), (std::vector<float>{0.f, 1.f}));  // (4, 4) / 2 * 0.5
  EXPECT_EQ(layer.before, (std::vector<std::pair<uint64_t, int64_t>>{{7, 0}}));
  Message rollback = Request(wire::ROLLBACK, 0, 0);
  rollback.meta.add_slices()->set_key(7);
  rollback.meta.mutable_slices(0)->set_length(2);
  kv_server_test::Sent out = Send(std::move(rollback));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].second.meta.error().find("not a data command"), std::string::npos) << out[0].second.meta.error();
  EXPECT_EQ(core_->NumRefused(), 1);
}

}  // namespace
}  // namespace tally
