// TrainerHooks: what a training loop asks of its kvstore beyond MXNet's calls (kvstore.h):
// dynamic loss scaling, steps skipped for a non-finite gradient, stopping together, the
// profiler's times, and two capabilities only some types have (fp32 master weights, steps
// kept on the GPUs). Every store has them: KVStore::trainer_hooks(). A script that pushes
// and pulls (tally.kv, bench ps) never needs them.
//
//   TrainerHooks* hooks = kv->trainer_hooks();
//   TALLY_RETURN_IF_ERROR(hooks->SetGradientScale(loss_scale));   // before the step's pushes
//   for (int key : keys) TALLY_RETURN_IF_ERROR(kv->PushPull(key, grads[key], weights[key], -key));
//   TALLY_RETURN_IF_ERROR(kv->WaitAll());
//   SkippedStep skip;
//   if (hooks->TakeSkippedStep(&skip)) halve the loss scale;
//   if (hooks->StopAgreed()) save a checkpoint and stop;
//   const TrainerHooks::Times t = hooks->TakeTimes();            // the step's pull and update
//   MasterWeightStore* masters = hooks->master_weights();         // null: the type keeps none
//
// Owned as the store it belongs to, and driven by the same one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

class MasterWeightStore;
class DeviceStepStore;

// A step skipped for a non-finite gradient (TrainerHooks::TakeSkippedStep).
struct SkippedStep {
  int64_t step = -1;
  int key = -1;              // the lowest key of the step whose gradient was not finite
  std::vector<int> workers;  // dist types: workers whose own push of it was not finite
};

class TrainerHooks {
 public:
  virtual ~TrainerHooks() = default;

  // Dynamic loss scaling: from the next push on, pushed gradients are `scale` times the
  // true ones and the updates divide them back. 1 by default, which every type takes;
  // types that cannot scale refuse any other value with a message naming themselves.
  virtual Status SetGradientScale(float scale) = 0;

  // Non-finite gradients (NaN, ±Inf). A key's n-th push is its step n - 1. When the summed
  // gradient of some key at step t is not finite, step t is skipped as a whole: once
  // WaitAll returns, no key keeps step t's update (keys already updated are rolled back to
  // their weights and optimizer state before it), the outputs of the step's pulls hold those
  // weights, and TakeSkippedStep reports it. dist_sync and dist_device_sync skip it on every
  // server and every worker's WaitAll reports it (docs/wire.md, "Non-finite gradients");
  // dist_async leaves out only the non-finite push. The single-process types roll back in
  // WaitAll, or at the next step's first push if WaitAll was not called.
  // True, once, when a step WaitAll waited for was skipped; *out says which and why.
  virtual bool TakeSkippedStep(SkippedStep* out) { return false; }

  // Stopping together (SIGTERM). After RequestStop, this worker's pushes ask the job to stop
  // after their step. StopAgreed says whether the job stops after the step last waited for:
  // single-process types once RequestStop was called; dist_sync and dist_device_sync once
  // an answer of that step carried some worker's request, which every worker sees at the
  // same step because every answer of step t waits for every worker's push of step t.
  virtual void RequestStop() { stop_requested_ = true; }
  virtual bool StopAgreed() const { return stop_requested_; }

  // --elastic: the job's lead can change (worker 0 may leave), so every live worker sends
  // the learning rate it sets, the same on each (docs/wire.md, SET_LR); without it worker 0
  // alone does. Types without servers ignore it.
  virtual void SetElastic() {}

  // --elastic under dist_sync and dist_device_sync: the dynamic loss scale of a worker that
  // joins the running job must be the others' at its first step (docs/faults.md, "A worker
  // joins"). The lead before the join (MembershipView::JoinTeller) tells it (TellLossScale,
  // once it has settled the step before), and the joiner waits for it from that worker alone
  // (JoinedLossScale). Types without joiners have nothing to tell.
  struct LossScaleState {
    float scale = 1.0f;
    int64_t clean = 0;      // clean steps in a row
    int64_t overflows = 0;  // steps skipped so far
  };
  virtual Status TellLossScale(int rank, int64_t step, const LossScaleState& state) { return Status::Ok(); }
  virtual Status JoinedLossScale(int64_t step, LossScaleState* out) {
    return Status::InvalidArgument("this kvstore type has no workers that join");
  }

  // For the profiler: time this store spent since the last call, in µs. pull: copying
  // pulled values into their destination; update: the optimizer (single-process types).
  // on_caller_thread: spent inside the caller's Push/Pull/PushPull calls (single-process
  // types), rather than on the store's own threads (the distributed types).
  struct Times {
    int64_t pull_us = 0;
    int64_t update_us = 0;
    bool on_caller_thread = true;
  };
  virtual Times TakeTimes() { return Times(); }

  // Optional capabilities (below): this store's, or null when its type has none.
  virtual MasterWeightStore* master_weights() { return nullptr; }
  virtual DeviceStepStore* device_steps() { return nullptr; }

 protected:
  bool stop_requested_ = false;
};

// Fp32 master weights kept for 16-bit values (multi_precision): GPU local and device, and the
// distributed types (whose servers keep them). TrainerHooks::master_weights() hands it out.
class MasterWeightStore {
 public:
  // Host fp32 copies of the masters, shaped as the keys' values: what a checkpoint of a
  // float16 or bfloat16 model saves.
  virtual Status GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) = 0;
  // Restores what GetMasterWeights gave (host fp32, shaped as the keys' values), after Init
  // and before the first push, so that a resumed 16-bit run continues from the exact fp32
  // weights rather than their rounded copies. The distributed types refuse: their servers
  // start from the fp32 values given to Init.
  virtual Status SetMasterWeights(const std::vector<int>& keys, const std::vector<Tensor>& values) = 0;

 protected:
  ~MasterWeightStore() = default;  // owned as the KVStore it belongs to
};

// Steps that never wait for the GPU: the GPU store of local and device only.
// TrainerHooks::device_steps() hands it out.
class DeviceStepStore {
 public:
  // per_device[d] is the d-th device's: loss_scale (fp32 [1]) replaces SetGradientScale's
  // scale, read by the update kernel when it runs, and found (int32 [1]) is set by WaitAll
  // to 1 when the step's summed gradients are not all finite, else 0. From then on WaitAll
  // queues the sum, the finite check and an update that skips itself when the flag is set,
  // with the learning rate read from device memory, and returns without waiting for the
  // GPU; TakeSkippedStep reports nothing (the flag says it). So a whole step can be recorded
  // once as a CUDA graph and replayed. Call before the first push.
  struct DeviceStepState {
    Tensor loss_scale;
    Tensor found;
  };
  virtual Status KeepStepOnDevice(const std::vector<DeviceStepState>& per_device) = 0;

 protected:
  ~DeviceStepStore() = default;  // owned as the KVStore it belongs to
};

}  // namespace tally
