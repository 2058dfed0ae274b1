// GpuKVStore: the single-process types `local` and `device` when the devices are GPUs.
// Internal to kvstore/; users create it through KVStore::Create with KVStoreSpec::gpus.
//
//   KVStoreSpec spec;
//   spec.type = KVStoreType::kDevice;
//   spec.gpus = {cuda0, cuda1};
//   std::unique_ptr<KVStore> kv;
//   TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
//   TALLY_RETURN_IF_ERROR(kv->SetOptimizer(opt));
//   TALLY_RETURN_IF_ERROR(kv->Init(keys, replica0_weights));
//   for each step:
//     kv->trainer_hooks()->SetGradientScale(loss_scale);
//     for each key, as backward makes its gradient:
//       TALLY_RETURN_IF_ERROR(kv->PushPull(key, {grad0, grad1}, {weight0, weight1}));
//     TALLY_RETURN_IF_ERROR(kv->WaitAll());   // the sum, the check, the update
//     if (kv->trainer_hooks()->TakeSkippedStep(&skip)) lower the loss scale;
//
// Every GPU keeps a replica of the model and runs the optimizer on it: gradients are summed
// across the GPUs with NCCL and every GPU applies the same update to the same sum, so the
// replicas stay identical, bit for bit. `local` and `device` are therefore the same store
// here (type() returns the type it was made with); on GPUs there is no reason to send the
// sum to the host and the weights back.
//
// State, all allocated by Init and none afterwards (no cudaMalloc in a step): per key and
// device an fp32 momentum (none when the optimizer's momentum is 0) and, for fp16 and bf16
// values, an fp32 master copy of the weights (multi_precision; without it, a scratch buffer
// of that size). An fp32 value has no copy: the weights given to PushPull are the ones
// updated, the model's own tensors.
//
// A step:
//   PushPull(key, grads, weights) records the pair and returns; nothing moves yet. Until the
//     next WaitAll returns, the caller must not write the pushed gradients nor read the
//     weights (as with the distributed types). Push and Pull alone are refused.
//   WaitAll() then, over every key recorded since the last WaitAll:
//     1. with more than one GPU, sums each gradient across the GPUs in place (Comm::Reduce:
//        all keys in one NCCL group, on each device's stream): the pushed gradient tensors
//        then hold the sum;
//     2. checks device 0's summed gradients for NaN and inf (AllFinite), which waits for
//        device 0's stream: the step's one host synchronisation;
//     3. if some gradient is not finite, updates nothing anywhere and records the step for
//        TakeSkippedStep (the step is the key's push count before this push, the key the
//        lowest whose sum is not finite); the gradient scale is left to the caller;
//     4. otherwise queues on every GPU one MultiSgdUpdate over all the step's keys with the
//        optimizer's settings, the learning rate of the last SetLearningRate and
//        rescale_grad = config.rescale_grad / gradient scale, and returns without waiting:
//        work queued later on a device's stream (the next forward pass) sees the new weights.
//   Every step must end with WaitAll: a key pushed twice before it is refused.
//
// Gradient compression (SetGradientCompression; the `device` type only, as MXNet's device
// kvstore): step 1 becomes, per key whose gradient is finite on every GPU, each GPU's
// gradient quantised with its own residual, the bits summed dequantised on the first GPU in
// device order and copied to every GPU (gpu_compressed_reduce.h): the same bits as the
// host's `device` store. A key not finite somewhere is summed by NCCL as before, and the
// step skipped.
//
// Multi-precision: a 16-bit weight is its fp32 master rounded to nearest even after every
// update. Without multi_precision a 16-bit weight is updated as the CPU's Updater does it,
// in fp32 from its own rounded value (the master buffer is refilled from the weight first),
// and GetMasterWeights refuses. Gradients are fp32 for fp32 weights, and the weight's dtype
// or fp32 for 16-bit weights; NCCL sums them in their own dtype.
//
// Checkpoints: GetOptimizerState gives host fp32 copies of device 0's momentum;
// SetOptimizerState writes every device's. GetMasterWeights gives host fp32 copies of device
// 0's masters, and for fp32 values of device 0's weights as last given to PushPull (or to
// Init, before the first push). All three are refused while a step is recorded and not
// waited for.
//
// Times: update_us is the host time WaitAll spends queuing the updates (step 4); the GPU runs
// them later, overlapped with what follows. on_caller_thread is false: that time is spent in
// WaitAll, not inside PushPull, so it must not be taken out of the pushes' time (the Trainer
// subtracts update_us from its PushPull time only when on_caller_thread). pull_us is 0:
// nothing is copied back.
//
// Thread-safety: none; driven by one thread, as every KVStore.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvstore/comm.h"
#include "kvstore/gpu_compressed_reduce.h"
#include "kvstore/kvstore.h"

namespace tally {

class GpuKVStore : public KVStore, public TrainerHooks, public MasterWeightStore, public DeviceStepStore {
 public:
  // REQUIRES: devices are distinct cuda devices that exist; comm sums over them.
  GpuKVStore(KVStoreType type, std::vector<Device> devices, std::unique_ptr<Comm> comm);

  KVStoreType type() const override { return type_; }
  TrainerHooks* trainer_hooks() override { return this; }
  MasterWeightStore* master_weights() override { return this; }
  DeviceStepStore* device_steps() override { return this; }
  // REQUIRES: called before Init (state is allocated by Init).
  Status SetOptimizer(const OptimizerConfig& config) override;
  // The device type only; before the first push.
  Status SetGradientCompression(const CompressionConfig& config) override;
  // With KeepStepOnDevice, also queues the new rate into each device's copy of it.
  void SetLearningRate(float lr) override;
  using KVStore::Init;
  // values: fp32, fp16 or bf16, on any device (replica 0's weights, normally on devices[0]).
  // Fails before SetOptimizer: the state allocated here depends on the optimizer.
  Status Init(const std::vector<int>& keys, const std::vector<Tensor>& values) override;
  Status Push(int key, const std::vector<Tensor>& vals, int priority) override;
  Status Pull(int key, const std::vector<Tensor>& outs, int priority) override;
  // grads[d] and weights[d] on devices[d], weights in the dtype given to Init.
  Status PushPull(int key, const std::vector<Tensor>& grads, const std::vector<Tensor>& weights,
                  int priority) override;
  Status WaitAll() override;
  bool TakeSkippedStep(SkippedStep* out) override;
  // REQUIRES: scale > 0 and finite. Applies from the next push on (trainer_hooks.h): a step's
  // update divides by the scale in force at its first PushPull.
  Status SetGradientScale(float scale) override;
  Status GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) override;
  Status SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) override;
  Status GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) override;
  // Every device's masters (16-bit keys with multi_precision); for an fp32 key, the weights
  // the store holds (Init's value before the first push, else every device's last pushed
  // weights). The 16-bit weights themselves are the caller's to load, rounded from the same
  // values (the Trainer does, from the checkpoint): before the first push the store knows
  // no replica's 16-bit weights.
  Status SetMasterWeights(const std::vector<int>& keys, const std::vector<Tensor>& values) override;
  Times TakeTimes() override;
  // per_device[d] on devices[d]; see trainer_hooks.h (DeviceStepStore). WaitAll then becomes steps 1, then per device
  // NonFiniteFlag over its own sums into found (the same bits everywhere, so the same
  // verdict), then the MultiSgdUpdate that reads found, the loss scale and the learning rate
  // from device memory.
  Status KeepStepOnDevice(const std::vector<DeviceStepState>& per_device) override;

 private:
  struct Replica {  // one key on one device
    Tensor master;  // fp32; undefined for fp32 values
    Tensor mom;     // fp32; undefined when momentum is 0
    Tensor grad;    // the pushed gradient, until WaitAll
    Tensor weight;  // the last pushed weights (for fp32 values on device 0, Init's value)
  };
  struct Entry {
    Shape shape;
    DType dtype = DType::kF32;
    std::vector<Replica> replicas;  // one per device
    int64_t pushes = 0;             // PushPull calls so far
    bool pending = false;           // pushed since the last WaitAll
    GpuCompressedKey compressed;    // gradient compression's buffers
  };

  Status InitKey(int key, const Tensor& value);
  Status Find(int key, const char* what, Entry** entry);
  Status CheckPush(int key, const Entry& e, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& weights) const;
  Status RefuseWhilePending(const char* what) const;
  // The pending keys' gradients on devices_[d], in key order.
  std::vector<Tensor> DeviceSums(size_t d) const;
  // Gradient compression's step 1 over grads (grads[i]: pending_[i]'s per device): the keys
  // it summed get their sums as the replicas' grads; the others stay in *raw for NCCL.
  void CompressedSums(const std::vector<std::vector<Tensor>>& grads, std::vector<int>* raw_keys,
                      std::vector<std::vector<Tensor>>* raw_grads);
  // Step 3's search: the lowest pending key whose summed gradient on device 0 is not finite.
  int LowestNonFiniteKey();
  // Step 4 on every device. REQUIRES: pending_ is sorted.
  void Update();
  std::string Name() const;  // "--kv-store device on cuda:0,cuda:1", for messages

  const KVStoreType type_;
  const std::vector<Device> devices_;
  const std::unique_ptr<Comm> comm_;  // NCCL's in-place sum
  bool has_optimizer_ = false;
  OptimizerConfig config_;
  CompressionConfig gc_;
  float gradient_scale_ = 1.0f;
  float step_scale_ = 1.0f;  // gradient_scale_ at the step's first push
  // KeepStepOnDevice: per device, its loss scale, finite flag and learning rate (fp32 [1]).
  std::vector<DeviceStepState> device_state_;
  std::vector<Tensor> device_lr_;
  std::map<int, Entry> entries_;
  std::vector<int> pending_;  // keys pushed since the last WaitAll
  SkippedStep skipped_;
  bool has_skipped_ = false;
  Times times_;
};

}  // namespace tally
