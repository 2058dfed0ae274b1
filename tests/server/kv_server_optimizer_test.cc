// A server's optimizer state as peers send and ask for it: SET_OPTIMIZER's rule parameters
// (absent: MXNet's defaults; out of range: refused naming the flag), INIT and PULL of one
// state slot (Meta.state_slot), and crafted states refused without changing anything.
#include <cmath>

#include <gtest/gtest.h>

#include "server/server.h"
#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {
using namespace kv_server_test;  // NOLINT: the fixture and its helpers

class KVServerOptimizerTest : public KVServerTest {
 protected:
  Message Adam() {
    Message m = Request(wire::SET_OPTIMIZER, Worker(0));
    m.meta.mutable_optimizer()->set_type("adam");
    m.meta.mutable_optimizer()->set_lr(0.1f);
    m.meta.mutable_optimizer()->set_rescale_grad(1.0f);
    return m;
  }
  Message StateInit(int slot, const std::vector<float>& v) {
    Message m = Request(wire::INIT, Worker(0), -1);
    m.meta.set_optimizer_state(true);
    m.meta.set_state_slot(slot);
    AddSlice(&m, 0, 0, Values(v));
    return m;
  }
  std::vector<float> PullSlot(int slot, int64_t step) {
    Message m = PullRequest(0, 0, step, 2);
    m.meta.set_optimizer_state(true);
    m.meta.set_state_slot(slot);
    Message answer = Ok(std::move(m));
    return answer.data.empty() ? std::vector<float>() : Floats(answer.data[0]);
  }
};

TEST_F(KVServerOptimizerTest, AdamsSlotsGoInAndOutOneAtATimeAndCraftedOnesAreRefused) {
  Make(1);
  workers_ = 1;
  Message bad = Adam();
  bad.meta.mutable_optimizer()->set_beta1(1.5f);
  Refused(std::move(bad), "--beta1");
  Ok(Adam());  // beta1, beta2 and epsilon absent: MXNet's 0.9, 0.999 and 1e-8
  Init(0, {1.f, -1.f});
  Init(1, {2.f});
  Ok(StateInit(0, {0.5f, 0.25f}));   // mean
  Ok(StateInit(2, {3.f, 3.f}));      // the update count
  Refused(StateInit(3, {1.f, 1.f}), "state_slot 3");
  Refused(StateInit(-1, {1.f, 1.f}), "state_slot -1");
  Refused(StateInit(2, {1.5f, 1.5f}), "step count");
  Refused(StateInit(2, {4.f, 5.f}), "differs");
  // Two keys, the second's count bad: the first's is not set either.
  Message two = StateInit(2, {5.f, 5.f});
  AddSlice(&two, 1, 0, Values({1.5f}));
  Refused(std::move(two), "step count");
  EXPECT_EQ(PullSlot(0, -1), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(PullSlot(2, -1), (std::vector<float>{3.f, 3.f}));  // the refusals changed nothing
  EXPECT_EQ(PullSlot(9, -1), (std::vector<float>{0.f, 0.f}));  // a slot adam lacks: zeros
  Push(0, 0, 0, Values({1.f, 1.f}));
  EXPECT_EQ(PullSlot(2, 0), (std::vector<float>{4.f, 4.f}));
  // Adam's step 4 from mean 0.5 and var 0: m = 0.9 * 0.5 + 0.1 * g, v = 0.001 * g^2.
  const double m = 0.9 * 0.5 + 0.1, v = 0.001, lr4 = 0.1 * std::sqrt(1 - std::pow(0.999, 4)) / (1 - std::pow(0.9, 4));
  EXPECT_NEAR(Floats(server_->Value(0, 0))[0], 1.0 - lr4 * m / (std::sqrt(v) + 1e-8), 1e-5);
}

TEST_F(KVServerOptimizerTest, StateForAnOptimizerWithoutStateIsRefused) {
  Make(1);
  workers_ = 1;
  SetOptimizer(0.1f, false, /*momentum=*/0.0f);
  Init(0, {1.f, -1.f});
  Refused(StateInit(0, {0.5f, 0.25f}), "keeps none");
}

}  // namespace
}  // namespace tally
