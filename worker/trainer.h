// Trainer: one process's data-parallel training step over its devices, through a KVStore.
//
//   TrainerConfig cfg;                       // model, devices, kvstore type, optimizer
//   std::unique_ptr<Trainer> trainer;
//   TALLY_RETURN_IF_ERROR(Trainer::Create(cfg, &trainer));
//   StepStats stats;
//   TALLY_RETURN_IF_ERROR(trainer->Step(images, labels, &stats));
//
// Devices are CPU devices or GPUs (TrainerConfig::gpus). On GPUs the replicas compute in the
// configured dtype (fp32, fp16 or bf16) with fp32 master weights in the kvstore; each step
// uploads its slice of the batch, converts it and pads its channels to what tensor cores want.
// fp16 uses dynamic loss scaling (worker/loss_scaler.h): the loss's gradient is multiplied by
// the scale, the kvstore divides it back, and a step whose gradients overflow is skipped and
// halves the scale.
//
// A step splits the batch evenly across the devices (one model replica each), runs forward
// and backward on each, and push-pulls every gradient through the kvstore, which sums them
// and updates the weights. Each gradient is pushed as soon as the last replica's backward
// pass has made it, so communication overlaps the rest of the backward pass. The loss is the mean over the whole batch (with dist_sync and
// dist_device_sync: over every worker's batch, as MXNet's rescale_grad), so the gradients do
// not depend on how the batch was split. Batch-norm running statistics stay per replica, as
// in MXNet. A step whose gradients are not finite (NaN, Inf) changes no weight (the
// kvstore skips it: TrainerHooks::TakeSkippedStep); last_skip() says so. Driven by one thread.
//
// Tests make a worker's gradient NaN at a step of the job through FaultHooks (nan_worker,
// nan_step, nan_all; base/fault_hooks.h), which Create reads.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "kvstore/kvstore.h"
#include "models/network.h"
#include "net/cluster.h"
#include "ops/graph.h"
#include "profile/records.h"
#include "worker/checkpoint.h"
#include "worker/loss_scaler.h"
#include "worker/wd_exclude.h"

namespace tally {

struct TrainerConfig {
  ModelConfig model;
  int num_devices = 1;  // cpu:0 .. cpu:num_devices-1, when gpus is empty
  std::vector<int> gpus;  // cuda:N for each N, one replica each; empty: CPU devices
  DType dtype = DType::kF32;  // float16 and bfloat16 need gpus
  LossScaleConfig loss_scale;  // float16 only
  // --benchmark 1 on GPUs: the first batch is uploaded once and every step trains on it
  // (the data source repeats one batch anyway), so a step measures compute alone.
  bool reuse_device_batch = false;
  // Wait for the GPUs after each forward and backward pass, so that last_step()'s phase
  // times are the GPUs' own rather than the time to queue their work (benchmarks' time
  // split; costs a little speed).
  bool synchronize_phases = false;
  // GPUs with --kv-store local or device: the step's figures (loss sum, accuracy counts,
  // the overflow verdict, the loss scale) stay on the GPUs, so that Step queues the whole
  // step and returns without waiting for a GPU; ReadStats brings the figures back. Off: Step
  // waits for the loss and the finite check, and fills every field of its StepStats.
  bool step_on_device = true;
  // With step_on_device on one GPU: from the second step on, the step (forward, loss,
  // backward, check, update, loss scale) is recorded once as a CUDA graph and replayed; a
  // batch of another shape records it again. Several GPUs run their steps queued (NCCL warns
  // that graphs of several devices launched from one thread may deadlock).
  bool cuda_graph = true;
  KVStoreType kv_store = KVStoreType::kDevice;  // --kv-store (ParseKVStoreType)
  // The distributed types (--overlap): Step returns once its gradients are pushed, and the
  // next Step's forward pass waits for each weight just before the layer that reads it
  // (KVStore::WaitKey), so that the pulls overlap the forward pass as the pushes overlap the
  // backward pass. Off: each Step waits for every pull before it returns. The weights each
  // step computes with are the same either way.
  bool overlap = true;
  // The job this worker has joined; required by the dist_* kvstore types. Not owned; must
  // outlive the Trainer.
  Cluster* cluster = nullptr;
  OptimizerConfig optimizer;
  // --gradient-compression, --gc-threshold: the dist_* types push packed bits
  // (KVStore::SetGradientCompression); the others refuse it.
  CompressionConfig gradient_compression;
  WdExclude wd_exclude;  // --wd-exclude: StartStore fills optimizer.no_wd_keys from it
  float label_smoothing = 0.0f;  // MXNet's smooth_alpha (ops.h SoftmaxCrossEntropy)
  int top_k = 5;  // also counts top-k accuracy when > 1
};

// The channels the network's first convolution takes: on GPUs in fp16/bf16, RGB gets a zero
// fourth (tensor cores take those convolutions in channels of 4 or more); else the image's.
// A batch made on the GPU (data/gpu_loader.h) must come with this many.
int StemInputChannels(const TrainerConfig& config);

struct StepStats {
  double loss_sum = 0;
  int64_t correct = 0;       // top-1
  int64_t topk_correct = 0;  // top-k, when TrainerConfig::top_k > 1
  int64_t samples = 0;
  int64_t skipped_steps = 0;  // steps skipped for a non-finite gradient (fp16 overflow included)
  void Add(const StepStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    topk_correct += o.topk_correct;
    samples += o.samples;
    skipped_steps += o.skipped_steps;
  }
};

class Trainer {
 public:
  // resume: a checkpoint whose parameters and optimizer state the run starts from (its
  // names and shapes must match the model's), or nullptr for a fresh start.
  static Status Create(const TrainerConfig& config, std::unique_ptr<Trainer>* out,
                       const Checkpoint* resume = nullptr);

  const TrainerConfig& config() const { return config_; }

  // images: [B, H, W, C] fp32; labels: [B] int32. Fails naming --batch-size when B does not
  // divide across the devices. When stats_on_device(), Step adds only the samples to
  // *stats: the rest comes from ReadStats.
  //
  // With TrainerConfig::overlap over the parameter server, Step leaves its communication
  // in flight and the next Step (or Finish) settles it: that call then reports the step's
  // skip (last_skip(), stats->skipped_steps), and StopAgreed refers to it, so a stop asked
  // before step t is agreed after step t + 1. A step after a skipped one runs its forward
  // pass again on the restored weights (its batch-norm running statistics see it twice).
  Status Step(const Tensor& images, const Tensor& labels, StepStats* stats);
  // Settles the step left in flight (above): waits for its pulls and reports its skip as
  // Step would. Call before reading the weights or the kvstore between steps, and at the
  // end; Snapshot and Evaluate call it themselves. Does nothing when no step is in flight.
  Status Finish(StepStats* stats);
  // Whether a step's communication is still in flight (Finish would wait for it).
  bool in_flight() const { return in_flight_; }
  // Whether Step keeps its figures on the GPUs (TrainerConfig::step_on_device took effect).
  bool stats_on_device() const { return on_device_; }
  // Adds the loss sum, the accuracy counts and the skipped steps of the Steps since the last
  // call to *stats, and brings loss_scaler() up to date: one wait for the GPUs. Adds nothing
  // when the stats are not on the device (Step gave them all).
  void ReadStats(StepStats* stats);
  // Whether the steps are being replayed from a CUDA graph.
  bool replaying_graph() const { return graph_ != nullptr; }
  // Inference on replica 0: adds the batch's loss and accuracy counts to stats.
  Status Evaluate(const Tensor& images, const Tensor& labels, StepStats* stats);

  void SetLearningRate(float lr) { kv_->SetLearningRate(lr); }

  // The last Step's time split (fwd, bwd, push, pull, wait, and update with the
  // single-process kvstore types; µs) and its gradients' L2 norm (the sum over the
  // devices, before the kvstore). The caller adds the rest (data wait, step, samples).
  // A step replayed from a CUDA graph has no split: its queueing time counts as fwd.
  const profile::StepRecord& last_step() const { return last_step_; }
  // Whether the last Step was skipped for a non-finite gradient, and why (nullptr: it was not).
  const SkippedStep* last_skip() const { return skipped_ ? &last_skip_ : nullptr; }
  // The job's step that last_skip() is about (the one Step or Finish settled).
  int64_t last_skip_step() const { return skipped_step_; }

  // Copies replica 0's parameters and the optimizer state (read from the servers in dist
  // modes) into c->params and c->states. Between steps only.
  Status Snapshot(Checkpoint* c);
  // Stopping together (TrainerHooks::RequestStop): ask before a step; after it, StopAgreed says
  // whether the job stops there.
  void RequestStop() { hooks_->RequestStop(); }
  bool StopAgreed() const { return overlap_ ? stop_agreed_ : hooks_->StopAgreed(); }
  Network& replica(int d) { return *replicas_[d]; }
  const LossScaler& loss_scaler() const { return scaler_; }
  int num_devices() const { return static_cast<int>(replicas_.size()); }
  KVStore& kvstore() { return *kv_; }

 private:
  Trainer() = default;
  // Create's parts: the devices of config_ (devices_); the kvstore, with the optimizer and
  // every trainable key (kv_, trainable_); the checkpoint's optimizer state and fp32 master
  // weights into it; the step's figures kept on the GPUs (step_on_device).
  Status PickDevices();
  Status StartStore(const Checkpoint* resume);
  Status RestoreStore(const Checkpoint& resume);
  // A worker that joined a running job: the weights Init pulled into values, its first step
  // and the others' loss scale there.
  Status TakeJoinedWeights(const std::vector<Tensor>& values);
  // The lead before a join (MembershipView::JoinTeller), after settling a step: tells each
  // worker that joins at the next one the loss scale to start with (TellLossScale).
  Status TellJoiners();
  Status KeepStepOnDevice();
  // Over the parameter server: a dist_* type and the job joined.
  bool distributed() const;
  // This worker joined a running --elastic job: its weights come from the servers.
  bool joins() const;
  void Count(const Tensor& logits, const Tensor& labels, StepStats* stats) const;
  // Replica d's share of a batch on its device, in the model's dtype and input channels
  // (the CPU replicas take the host slices as they are). Images may already be on that GPU
  // in that dtype and those channels (data/gpu_loader.h): they are copied on the device.
  void PrepareSlice(int d, const Tensor& images, const Tensor& labels, Tensor* x, Tensor* y) const;
  // Uploads host images to *x (shape want) through page-locked memory, converting and padding.
  void StageUpload(const Tensor& images, const Shape& want, Device device, Tensor* x) const;
  void PushGradient(int key);
  // Step's parts: every replica's forward pass (replica 0's waiting per weight when a step
  // is in flight); the loss, the backward passes and their pushes.
  void Forward(const Tensor& images, const Tensor& labels, std::vector<Tensor>* logits,
               std::vector<Tensor>* targets);
  void BackwardAndPush(int batch, const std::vector<Tensor>& logits, const std::vector<Tensor>& targets,
                       StepStats* stats);
  // The network's parameter-needed callback: waits for key's pull of the step in flight.
  void WaitForKey(int key);
  // The kvstore's WaitAll for the last step, its skip and the loss scale's update; the step
  // record's times (RecordStoreTimes) when the step was not left in flight.
  Status Settle(StepStats* stats);
  // The step record's push, pull, update and wait times and gradient norm.
  void RecordStoreTimes(int64_t wait);
  // The device-resident step (step_on_device): the batch in step_x_/step_y_, queued whole.
  Status StepOnDevice(const Tensor& images, const Tensor& labels, StepStats* stats);
  // Queues forward, loss, backward, the kvstore's sum and update and the loss scale's update
  // on every device; what a CUDA graph records.
  void QueueStep(float grad_scale);
  // Copies the checkpoint's parameters into every replica.
  Status LoadParameters(const Checkpoint& c);
  // FaultHooks::nan_step: puts the NaN into this step's gradients when they are the ones asked for.
  void InjectNan(const std::vector<Tensor>& grads);

  TrainerConfig config_;
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<Network>> replicas_;
  LossScaler scaler_;
  std::vector<Tensor> device_images_, device_labels_;  // reuse_device_batch: the kept batch
  std::unique_ptr<KVStore> kv_;
  TrainerHooks* hooks_ = nullptr;  // kv_'s: loss scale, skipped steps, stop, times, masters
  // step_on_device: per device, the step's input buffers (fixed addresses for the graph) and
  // its figures: loss_sum fp32 [2] (Kahan), correct and topk int32 [1], scale fp32 [1],
  // scaler int32 [2] (clean steps, skipped steps), found int32 [1].
  struct DeviceFigures {
    Tensor x, y;
    Tensor loss_sum, correct, topk, scale, scaler, found;
  };
  std::vector<DeviceFigures> figures_;
  bool on_device_ = false;
  std::unique_ptr<DeviceGraph> graph_;
  int64_t eager_device_steps_ = 0;  // device-resident steps run without a graph, at this shape
  int64_t skipped_read_ = 0;        // skipped steps ReadStats has reported
  std::vector<int> trainable_;  // indices into Parameters() that are kvstore keys
  Status push_status_;          // the first failed push of the current step
  Status needed_status_;        // the first failed WaitKey of the current forward pass
  bool overlap_ = false;        // TrainerConfig::overlap took effect (a distributed type)
  bool in_flight_ = false;      // the last Step's communication has not been waited for
  int64_t key_wait_us_ = 0;     // in WaitForKey during this step
  int64_t skipped_step_ = -1;   // the step last_skip_ is about
  // With overlap: the kvstore's StopAgreed when the last step was settled. Read then, not
  // when asked, because answers of the step in flight may carry the request already, and
  // not every worker would have seen them by the time it asks.
  bool stop_agreed_ = false;
  profile::StepRecord last_step_;
  int64_t push_us_ = 0;         // inside PushGradient during this step
  double grad_sumsq_ = 0;       // of this step's gradients so far
  int64_t step_ = 0;            // the job's step of the next Step (a resumed run continues its count)
  // The job's step this run started at (a resumed run's checkpoint step): the servers and the
  // membership changes count this run's steps from 0, the Trainer the job's.
  int64_t run_start_step_ = 0;
  bool skipped_ = false;        // the last Step was skipped; last_skip_ says why
  SkippedStep last_skip_;
  // FaultHooks::nan_*: the step to poison (-1: none), every value or one, and whether the one
  // has been written this step.
  int64_t nan_step_ = -1;
  bool nan_all_ = false;
  bool nan_written_ = false;
};

// Checks that a global batch divides across the devices; the message names --batch-size.
Status CheckBatchSplit(int batch_size, int num_devices);

}  // namespace tally
