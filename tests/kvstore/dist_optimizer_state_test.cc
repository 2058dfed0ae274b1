// A server optimizer's whole state through a checkpoint of a dist_sync job: worker 0 reads
// every slot from the servers (GetOptimizerState: PULL with optimizer_state, one state_slot
// at a time), a fresh job of the same shape gets it back (SetOptimizerState: INIT per slot),
// and its next step equals, bit for bit, the step of the job that never stopped. Adam's
// state is 3 slots (mean, var, update count), LARS's 2 (momentum, previous lr).
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "kvstore/dist_kvstore.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/local_job.h"

namespace tally {
namespace {

// One key sliced over both servers (above the slicing bound), one whole.
const std::vector<int64_t> kSizes = {100003, 7};

Tensor Filled(int64_t n, const std::function<float(int64_t)>& f) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = f(i);
  return t;
}

Tensor Grad(int rank, int key, int step) {
  return Filled(kSizes[key], [=](int64_t i) { return 0.01f * (rank + 1) * (1 + (i + key) % 5) - 0.02f * step; });
}

std::unique_ptr<KVStore> Store(Cluster* c, const OptimizerConfig& opt) {
  KVStoreSpec spec;
  spec.type = KVStoreType::kDistSync;
  spec.cluster = c;
  std::unique_ptr<KVStore> kv;
  EXPECT_TRUE(KVStore::Create(spec, &kv).ok());
  EXPECT_TRUE(kv->SetOptimizer(opt).ok());
  return kv;
}

// Steps [first, last) of both keys; out: the weights after them.
void Steps(KVStore* kv, int rank, int first, int last, std::vector<Tensor>* w) {
  for (int step = first; step < last; ++step) {
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(kv->PushPull(k, {Grad(rank, k, step)}, {(*w)[k]}).ok());
    ASSERT_TRUE(kv->WaitAll().ok());
  }
}

void ExpectResumesBitForBit(const OptimizerConfig& opt, int slots) {
  std::vector<Tensor> at_step2(2), at_step3(2), states;
  {
    LocalJob job(false, 2, 2);
    job.Run([&](int rank, Cluster* cluster) {
      auto kv = Store(cluster, opt);
      std::vector<Tensor> w = {Filled(kSizes[0], [](int64_t i) { return 0.5f + 1e-4f * (i % 9); }),
                               Filled(kSizes[1], [](int64_t i) { return -0.25f * i; })};
      ASSERT_TRUE(kv->Init({0, 1}, w).ok());
      Steps(kv.get(), rank, 0, 2, &w);
      if (rank == 0) {
        ASSERT_TRUE(kv->GetOptimizerState({0, 1}, &states).ok());
        at_step2 = {w[0].Clone(), w[1].Clone()};
      }
      ASSERT_TRUE(kv->Barrier().ok());
      Steps(kv.get(), rank, 2, 3, &w);
      if (rank == 0) at_step3 = w;
    });
  }
  ASSERT_EQ(states.size(), 2u);
  for (int k = 0; k < 2; ++k) ASSERT_EQ(states[k].numel(), slots * kSizes[k]) << "key " << k;
  LocalJob job(false, 2, 2);
  job.Run([&](int rank, Cluster* cluster) {
    auto kv = Store(cluster, opt);
    std::vector<Tensor> w = {at_step2[0].Clone(), at_step2[1].Clone()};
    ASSERT_TRUE(kv->Init({0, 1}, w).ok());
    ASSERT_TRUE(kv->SetOptimizerState({0, 1}, states).ok());
    Steps(kv.get(), rank, 2, 3, &w);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(0, std::memcmp(w[k].raw_data(), at_step3[k].raw_data(), w[k].nbytes())) << "worker " << rank << " key " << k;
    }
    // A state that does not fit the optimizer is refused, naming the key.
    std::vector<Tensor> wrong = {states[0], states[1].Slice(0, kSizes[1])};
    Status s = kv->SetOptimizerState({0, 1}, wrong);
    EXPECT_NE(s.message().find("key 1"), std::string::npos) << s;
  });
}

TEST(DistOptimizerState, AdamsMeanVarAndCountResumeBitForBit) {
  OptimizerConfig opt;
  opt.type = "adam";
  opt.lr = 0.01f;
  ExpectResumesBitForBit(opt, 3);
}

TEST(DistOptimizerState, LarsMomentumAndPreviousLrResumeBitForBit) {
  OptimizerConfig opt;
  opt.type = "lars";
  opt.lr = 0.5f;
  opt.eta = 0.01f;
  ExpectResumesBitForBit(opt, 2);
}

}  // namespace
}  // namespace tally
