// GpuDistKVStore: a distributed kvstore type (dist_sync, dist_device_sync, dist_async) on a
// worker whose model replicas are on GPUs. Internal to kvstore/; users create it through
// KVStore::Create with KVStoreSpec::gpus and ::cluster (kvstore.h).
//
//   KVStoreSpec spec;
//   spec.type = KVStoreType::kDistDeviceSync;
//   spec.gpus = {cuda0, cuda1};
//   spec.cluster = cluster;
//   std::unique_ptr<KVStore> kv;
//   TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
//   ... SetOptimizer, Init(keys, host fp32 values) as with any distributed type ...
//   for each key, as backward makes its gradient:
//     TALLY_RETURN_IF_ERROR(kv->PushPull(key, {grad0, grad1}, {weight0, weight1}, -key));
//   TALLY_RETURN_IF_ERROR(kv->WaitAll());
//
// It wraps the worker's DistKVStore (made for one device) and puts the GPUs in front of it:
//   PushPull(key, grads, weights)
//     1. with more than one GPU, sums the key's gradient across them in place with NCCL
//        (Comm::Reduce), so the worker pushes one gradient, as MXNet's dist_device_sync
//        reduces on the worker's GPUs before pushing;
//     2. queues a copy of device 0's sum into a page-locked host buffer (the gradient's
//        dtype, so fp16 gradients travel as fp16) and returns without waiting for it: the
//        caller goes on queueing the rest of the backward pass;
//   a sending thread waits for each copy in turn and hands it to the DistKVStore's
//   PushPull, whose pulled weights land in a second page-locked buffer per key (the
//   weights' dtype: the servers keep the fp32 masters and send them converted).
//   WaitAll() waits for the sending thread to have handed over every push, then for the
//     DistKVStore's WaitAll (which writes the restored weights of a skipped step), then
//     queues the upload of every pushed key's weights to every GPU (Comm::Broadcast) and
//     returns: work queued later on those streams (the next forward pass) sees the new
//     weights.
// The gradients given to PushPull must not be written, nor the weights read, until WaitAll
// returns (as with every distributed type).
//
// Gradient compression (SetGradientCompression): step 2 quantises on device 0 instead, as
// the DistKVStore would on the host, slice by server slice (QuantizeSlicesOnGpu): a finite
// check per slice, the gradient divided by the loss scale (SetGradientScale) and times the
// compression's scale, the key's fp32 residual kept on device 0. Only the packed words and
// one flag per slice are copied down; the sending thread hands them to the DistKVStore's
// PushPullPacked. A slice that is not finite goes uncompressed, its residual untouched (the
// servers skip the step): the sending thread then copies the raw sum down first.
//
// Everything else (optimizer, learning rate, loss scale, checkpoints, skipped steps,
// stopping together, rank) is the DistKVStore's. Driven by one thread, as every KVStore; the
// DistKVStore is then driven by the sending thread during a step and by the caller between
// steps, never by both at once.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/comm.h"
#include "kvstore/kvstore.h"
#include "kvstore/packed_push.h"
#include "ops/device.h"

namespace tally {

class GpuDistKVStore : public KVStore, public TrainerHooks {
 public:
  // inner: a distributed store made for one device; comm: the sum over the GPUs.
  // REQUIRES: devices are distinct cuda devices that exist.
  GpuDistKVStore(std::unique_ptr<KVStore> inner, std::vector<Device> devices, std::unique_ptr<Comm> comm);
  // Waits for the sending thread to finish what it was given, then stops it.
  ~GpuDistKVStore() override;

  KVStoreType type() const override { return inner_->type(); }
  int rank() const override { return inner_->rank(); }
  int num_workers() const override { return inner_->num_workers(); }
  // --elastic: the DistKVStore's (a joiner's first step and weights come from its Init).
  MembershipView* membership_view() override { return inner_->membership_view(); }
  Status TellLossScale(int rank, int64_t step, const LossScaleState& state) override {
    return inner_->trainer_hooks()->TellLossScale(rank, step, state);
  }
  Status JoinedLossScale(int64_t step, LossScaleState* out) override {
    return inner_->trainer_hooks()->JoinedLossScale(step, out);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status SetOptimizer(const OptimizerConfig& config) override { return inner_->SetOptimizer(config); }
  // Quantised on device 0 (above); the DistKVStore sends the bits.
  Status SetGradientCompression(const CompressionConfig& config) override;
  void SetLearningRate(float lr) override { inner_->SetLearningRate(lr); }
  using KVStore::Init;
  // values: on the host (the servers' fp32 start); every key in one call, as the DistKVStore.
  Status Init(const std::vector<int>& keys, const std::vector<Tensor>& values) override {
    return inner_->Init(keys, values);
  }
  // Refused: a GPU worker pushes and pulls together (PushPull).
  Status Push(int key, const std::vector<Tensor>& vals, int priority) override;
  Status Pull(int key, const std::vector<Tensor>& outs, int priority) override;
  // grads[d] and weights[d] on devices[d]; grads all of one dtype, weights all of one dtype.
  Status PushPull(int key, const std::vector<Tensor>& grads, const std::vector<Tensor>& weights,
                  int priority) override;
  Status WaitAll() override;
  // Waits for the sending thread to have handed everything over, then for key's answer
  // alone, and queues the upload of its weights to every GPU; WaitAll uploads the rest (all
  // of the step's keys again when the step was skipped: the servers restored them).
  Status WaitKey(int key) override;
  Status GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) override {
    return inner_->GetOptimizerState(keys, states);
  }
  Status SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) override {
    return inner_->SetOptimizerState(keys, states);
  }
  TrainerHooks* trainer_hooks() override { return this; }
  Status SetGradientScale(float scale) override;
  MasterWeightStore* master_weights() override { return inner_hooks_->master_weights(); }
  bool TakeSkippedStep(SkippedStep* out) override;
  void RequestStop() override { inner_hooks_->RequestStop(); }
  void SetElastic() override { inner_hooks_->SetElastic(); }
  bool StopAgreed() const override { return inner_hooks_->StopAgreed(); }
  Times TakeTimes() override { return inner_hooks_->TakeTimes(); }

 private:
  struct Staged {  // one key's host buffers
    Tensor grad;    // page-locked, the gradients' dtype
    Tensor weight;  // page-locked, the weights' dtype
    // Gradient compression: the key's slices' layout in packed, the residual (fp32, device
    // 0), the packed words and the slices' flags (1: not finite) on device 0 and page-locked.
    std::vector<PackedSlice> layout;
    Tensor residual, packed_dev, nonfinite_dev, packed, nonfinite;
  };
  struct Send {  // a push the sending thread hands to inner_ once its copy has landed
    int key = 0;
    int priority = 0;
    DeviceFence copied;
    Staged buffers;
    Tensor sum;  // compressed: device 0's sum, copied down only when a slice is not finite
  };
  // Compression: queues the quantisation of key's sum on device 0 and the copy of its bits.
  Status QueueQuantized(int key, const Tensor& sum, Staged* staged, Send* send);
  // The sending thread's hand-over of a compressed push.
  Status SendPacked(const Send& send);

  void SendLoop();
  // Waits until the sending thread has handed over everything queued; its first failure
  // (kept for WaitAll when keep_status).
  Status Drain(bool keep_status = false);

  const std::unique_ptr<KVStore> inner_;
  TrainerHooks* const inner_hooks_;  // inner_'s
  const std::vector<Device> devices_;
  const std::unique_ptr<Comm> comm_;  // NCCL's in-place sum; the weights' upload
  PackedPushes* const packed_pushes_;  // inner_'s
  CompressionConfig gc_;
  float loss_scale_ = 1.0f;  // SetGradientScale's
  std::map<int, Staged> staged_;            // by key; made at the key's first push
  // Pushed since the last WaitAll: the weights to upload to, per key; those WaitKey has
  // uploaded already move to uploaded_.
  std::map<int, std::vector<Tensor>> pending_;
  std::map<int, std::vector<Tensor>> uploaded_;
  // The skipped step WaitAll took from inner_ (to re-upload the restored weights), until
  // TakeSkippedStep hands it on.
  SkippedStep skipped_;
  bool has_skipped_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Send> queue_;   // GUARDED_BY(mu_)
  bool sending_ = false;     // GUARDED_BY(mu_): the thread is handing one over
  bool stopping_ = false;    // GUARDED_BY(mu_)
  Status send_status_;       // GUARDED_BY(mu_): the first failed push of the step
  std::thread sender_;
};

}  // namespace tally
