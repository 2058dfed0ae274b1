#include "worker/trainer.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "models/init.h"
#include "ops/device.h"
#include "base/fault_hooks.h"
#include "ops/ops.h"
#include "profile/trace.h"

namespace tally {
namespace {

std::map<std::string, const Tensor*> ByName(const std::vector<NamedTensor>& tensors) {
  std::map<std::string, const Tensor*> out;
  for (const NamedTensor& n : tensors) out[n.name] = &n.tensor;
  return out;
}

// The store's fp32 master weights, or why it keeps none (trainer_hooks.h, MasterWeightStore).
Status MasterWeightsOf(KVStore* kv, MasterWeightStore** out) {
  *out = kv->trainer_hooks()->master_weights();
  if (*out != nullptr) return Status::Ok();
  return Status::InvalidArgument("--kv-store " + kv->name() + " keeps no fp32 master weights here");
}

}  // namespace

Status CheckBatchSplit(int batch_size, int num_devices) {
  if (batch_size <= 0) return Status::InvalidArgument("--batch-size must be positive");
  if (batch_size % num_devices != 0) {
    return Status::InvalidArgument("--batch-size " + std::to_string(batch_size) +
                                   " does not divide across " + std::to_string(num_devices) +
                                   " devices");
  }
  return Status::Ok();
}

int StemInputChannels(const TrainerConfig& config) {
  const int image = static_cast<int>(config.model.image_shape[0]);
  return !config.gpus.empty() && config.dtype != DType::kF32 && image < 4 ? 4 : image;
}

Status Trainer::Create(const TrainerConfig& config, std::unique_ptr<Trainer>* out, const Checkpoint* resume) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  TALLY_RETURN_IF_ERROR(t->PickDevices());
  t->scaler_ = LossScaler(config.loss_scale, /*enabled=*/config.dtype == DType::kF16);
  for (const Device& device : t->devices_) {
    ModelConfig model = config.model;
    // CPU "devices" are replicas in one host memory: their tensors all live on cpu:0.
    model.device = device.is_cpu() ? Device::Cpu() : device;
    model.dtype = config.dtype;
    // A worker joining a running job pulls every trainable parameter (StartStore): drawing
    // them first would be most of its time to the first step.
    if (t->joins()) model.initializer = kNoDraws;
    if (StemInputChannels(config) > model.image_shape[0]) model.input_channels = StemInputChannels(config);
    std::unique_ptr<Network> net;
    TALLY_RETURN_IF_ERROR(CreateNetwork(model, &net));  // same seed: identical replicas
    t->replicas_.push_back(std::move(net));
  }
  if (resume != nullptr) {
    TALLY_RETURN_IF_ERROR(t->LoadParameters(*resume));
    t->step_ = resume->step;
    t->run_start_step_ = resume->step;
  }
  TALLY_RETURN_IF_ERROR(t->StartStore(resume));
  if (resume != nullptr) TALLY_RETURN_IF_ERROR(t->RestoreStore(*resume));
  const FaultHooks& hooks = FaultHooksInEffect();
  if (hooks.nan_step >= 0 && hooks.nan_worker == t->kv_->rank()) {
    t->nan_step_ = hooks.nan_step;
    t->nan_all_ = hooks.nan_all;
  }
  if (!config.gpus.empty() && !t->distributed() && config.step_on_device) {
    TALLY_RETURN_IF_ERROR(t->KeepStepOnDevice());
  }
  Trainer* self = t.get();
  t->replicas_.back()->SetGradientReadyCallback([self](int key) { self->PushGradient(key); });
  t->overlap_ = config.overlap && t->distributed();
  if (t->overlap_) t->replicas_[0]->SetParameterNeededCallback([self](int key) { self->WaitForKey(key); });
  *out = std::move(t);
  return Status::Ok();
}

Status Trainer::PickDevices() {
  if (!config_.gpus.empty()) {
    for (int g : config_.gpus) {
      const Device d{Device::Kind::kCuda, g};
      for (const Device& seen : devices_) {
        if (seen == d) return Status::InvalidArgument("--gpus names " + d.ToString() + " twice");
      }
      Status s = CheckDevice(d);
      if (!s.ok()) return Status::InvalidArgument("--gpus: " + s.message());
      devices_.push_back(d);
    }
    return Status::Ok();
  }
  if (config_.num_devices < 1) return Status::InvalidArgument("at least one device is needed");
  if (config_.dtype != DType::kF32) {
    return Status::InvalidArgument(std::string("--dtype ") + DTypeName(config_.dtype) +
                                   " needs --gpus; CPU workers compute in float32");
  }
  for (int d = 0; d < config_.num_devices; ++d) devices_.push_back(Device::Cpu(d));
  return Status::Ok();
}

bool Trainer::joins() const { return distributed() && config_.cluster->joined_after_epoch() > 0; }

bool Trainer::distributed() const { return config_.cluster != nullptr && IsDistributed(config_.kv_store); }

Status Trainer::StartStore(const Checkpoint* resume) {
  const bool on_gpus = !config_.gpus.empty();
  KVStoreSpec spec;
  spec.type = config_.kv_store;
  spec.num_devices = config_.num_devices;
  if (on_gpus) spec.gpus = devices_;
  spec.cluster = config_.cluster;
  TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv_));
  hooks_ = kv_->trainer_hooks();
  config_.optimizer.no_wd_keys = NoWdKeys(replicas_[0]->Parameters(), config_.wd_exclude);
  TALLY_RETURN_IF_ERROR(kv_->SetOptimizer(config_.optimizer));
  TALLY_RETURN_IF_ERROR(kv_->SetGradientCompression(config_.gradient_compression));
  const std::vector<Parameter*>& params = replicas_[0]->Parameters();
  std::vector<Tensor> values;
  const std::map<std::string, const Tensor*> resumed = resume ? ByName(resume->params) : std::map<std::string, const Tensor*>();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i]->trainable) continue;
    trainable_.push_back(static_cast<int>(i));
    if (on_gpus && distributed()) {
      // The servers keep fp32 master weights: they start from the checkpoint's exact values,
      // or from the model's.
      Tensor host = Tensor::Empty(params[i]->value.shape(), DType::kF32);
      auto it = resumed.find(params[i]->name);
      host.CopyFrom(it != resumed.end() ? *it->second : params[i]->value);
      values.push_back(host);
    } else {
      values.push_back(params[i]->value);
    }
  }
  TALLY_RETURN_IF_ERROR(kv_->Init(trainable_, values));
  return TakeJoinedWeights(values);
}

// A worker that joined a running --elastic job (MembershipView::first_step): Init wrote the
// job's weights after the step before its first into `values`; every replica takes them, and
// the job's step count goes on from there.
Status Trainer::TakeJoinedWeights(const std::vector<Tensor>& values) {
  const int64_t first = kv_->membership_view()->first_step();
  if (first == 0) {
    if (!joins()) return Status::Ok();
    return Status::Internal("worker " + std::to_string(kv_->rank()) +
                            " joined the job but its store pulled no weights (its model is not initialised)");
  }
  step_ = first;
  for (size_t j = 0; j < trainable_.size(); ++j) {
    for (auto& replica : replicas_) {
      Tensor& value = replica->Parameters()[trainable_[j]]->value;
      if (value.raw_data() != values[j].raw_data()) value.CopyFrom(values[j]);
    }
  }
  if (!IsDistributedSync(kv_->type())) return Status::Ok();
  // The others' dynamic loss scale at this step, which the lead before the join tells once it
  // has settled the step before (TellJoiners): every push of a step must carry the same scale.
  TrainerHooks::LossScaleState state;
  TALLY_RETURN_IF_ERROR(hooks_->JoinedLossScale(step_, &state));
  scaler_.Restore(state.scale, static_cast<int32_t>(state.clean), state.overflows);
  return Status::Ok();
}

Status Trainer::TellJoiners() {
  if (!distributed() || !IsDistributedSync(kv_->type())) return Status::Ok();
  MembershipView* view = kv_->membership_view();
  if (view->membership().epoch == 0) return Status::Ok();  // nobody has joined
  std::vector<MembershipView::Membership> changes;
  TALLY_RETURN_IF_ERROR(view->HeardMembership(&changes));
  std::vector<int> before = MembershipView::Everyone(kv_->num_workers()).live;
  TrainerHooks::LossScaleState state;
  state.scale = scaler_.scale();
  state.clean = scaler_.clean_steps();
  state.overflows = scaler_.overflows();
  for (const MembershipView::Membership& c : changes) {
    // c.from_step counts this run's steps, step_ the job's (a resumed run: run_start_step_);
    // the joiner asks by its store's first step, in the run's count. The lead before the
    // change tells (MembershipView::JoinTeller; the joiner takes it from that worker alone).
    const bool tells = c.from_step + run_start_step_ == step_ &&
                       MembershipView::JoinTeller(changes, c.epoch, kv_->num_workers()) == kv_->rank();
    for (int r : c.live) {
      if (!tells || std::find(before.begin(), before.end(), r) != before.end()) continue;
      TALLY_RETURN_IF_ERROR(hooks_->TellLossScale(r, c.from_step, state));
    }
    before = c.live;
  }
  return Status::Ok();
}

Status Trainer::RestoreStore(const Checkpoint& resume) {
  const std::vector<Parameter*>& params = replicas_[0]->Parameters();
  Status s;
  if (!resume.weights_only) {  // weights only: the optimizer starts afresh
    const std::map<std::string, const Tensor*> by_name = ByName(resume.states);
    std::vector<Tensor> states;
    for (int i : trainable_) {
      auto it = by_name.find(params[i]->name);
      states.push_back(it == by_name.end() ? Tensor() : *it->second);
    }
    s = kv_->SetOptimizerState(trainable_, states);
    if (!s.ok()) return Status::InvalidArgument("the checkpoint's optimizer state: " + s.message());
  }
  if (config_.dtype == DType::kF32 || !config_.optimizer.multi_precision || distributed()) return Status::Ok();
  // The kvstore's masters were made from the 16-bit weights; the checkpoint has them exact.
  const std::map<std::string, const Tensor*> weights = ByName(resume.params);
  std::vector<Tensor> masters;
  for (int i : trainable_) {
    auto it = weights.find(params[i]->name);
    if (it != weights.end()) {
      masters.push_back(*it->second);
      continue;
    }
    Tensor master = Tensor::Empty(params[i]->value.shape(), DType::kF32);  // a weights-only start left it initial
    master.CopyFrom(params[i]->value);
    masters.push_back(master);
  }
  MasterWeightStore* store = nullptr;
  s = MasterWeightsOf(kv_.get(), &store);
  if (s.ok()) s = store->SetMasterWeights(trainable_, masters);
  if (!s.ok()) return Status::InvalidArgument("the checkpoint's weights: " + s.message());
  return Status::Ok();
}

Status Trainer::KeepStepOnDevice() {
  DeviceStepStore* store = hooks_->device_steps();
  if (store == nullptr) {
    return Status::InvalidArgument("--kv-store " + kv_->name() + " cannot keep a step on the device (only local "
                                   "and device on GPUs can)");
  }
  std::vector<DeviceStepStore::DeviceStepState> states;
  for (const Device& d : devices_) {
    DeviceFigures f;
    f.loss_sum = Tensor::Zeros({2}, DType::kF32, d);
    f.correct = Tensor::Zeros({1}, DType::kI32, d);
    f.topk = Tensor::Zeros({1}, DType::kI32, d);
    f.scale = Tensor::Empty({1}, DType::kF32, d);
    f.scale.Fill(scaler_.scale());
    f.scaler = Tensor::Zeros({2}, DType::kI32, d);
    f.found = Tensor::Zeros({1}, DType::kI32, d);
    states.push_back({f.scale, f.found});
    figures_.push_back(f);
  }
  TALLY_RETURN_IF_ERROR(store->KeepStepOnDevice(states));
  on_device_ = true;
  return Status::Ok();
}

Status Trainer::LoadParameters(const Checkpoint& c) {
  const std::map<std::string, const Tensor*> by_name = ByName(c.params);
  const std::vector<Parameter*>& params = replicas_[0]->Parameters();
  if (by_name.size() != params.size() && !c.weights_only) {
    return Status::InvalidArgument("the checkpoint has " + std::to_string(by_name.size()) + " parameters, the model " +
                                   std::to_string(params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = by_name.find(params[i]->name);
    if (it == by_name.end() && c.weights_only) continue;  // keeps its initial value
    if (it == by_name.end()) return Status::InvalidArgument("the checkpoint has no parameter " + params[i]->name);
    const Tensor& v = *it->second;
    if (v.shape() != params[i]->value.shape() || v.dtype() != DType::kF32 || !v.device().is_cpu()) {
      return Status::InvalidArgument("the checkpoint's " + params[i]->name + " is " + v.ToString() + ", the model's " +
                                     params[i]->value.ToString());
    }
    for (auto& replica : replicas_) replica->Parameters()[i]->value.CopyFrom(v);
  }
  return Status::Ok();
}

Status Trainer::Snapshot(Checkpoint* c) {
  StepStats settled;
  TALLY_RETURN_IF_ERROR(Finish(&settled));
  c->params.clear();
  c->states.clear();
  const std::vector<Parameter*>& params = replicas_[0]->Parameters();
  // A 16-bit model's weights are saved from the kvstore's fp32 masters; the rest as held.
  std::map<int, Tensor> masters;
  if (config_.dtype != DType::kF32 && config_.optimizer.multi_precision) {
    std::vector<Tensor> m;
    MasterWeightStore* store = nullptr;
    TALLY_RETURN_IF_ERROR(MasterWeightsOf(kv_.get(), &store));
    TALLY_RETURN_IF_ERROR(store->GetMasterWeights(trainable_, &m));
    for (size_t i = 0; i < trainable_.size(); ++i) masters[trainable_[i]] = m[i];
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter* p = params[i];
    auto it = masters.find(static_cast<int>(i));
    Tensor host = Tensor::Empty(p->value.shape(), DType::kF32);
    host.CopyFrom(it != masters.end() ? it->second : p->value);
    c->params.push_back({p->name, host});
  }
  std::vector<Tensor> states;
  TALLY_RETURN_IF_ERROR(kv_->GetOptimizerState(trainable_, &states));
  for (size_t i = 0; i < trainable_.size(); ++i) {
    if (!states[i].defined()) continue;
    // One slot (the momentum): the parameter's shape; several (adam's mean, var, count):
    // [slots, the parameter's shape] (docs/checkpoint.md).
    const Shape& shape = params[trainable_[i]]->value.shape();
    const int64_t n = params[trainable_[i]]->value.numel();
    Shape slotted = shape;
    if (states[i].numel() != n) slotted.insert(slotted.begin(), states[i].numel() / n);
    c->states.push_back({params[trainable_[i]]->name, states[i].Reshape(slotted)});
  }
  return Status::Ok();
}

void Trainer::PrepareSlice(int d, const Tensor& images, const Tensor& labels, Tensor* x,
                           Tensor* y) const {
  const Device device = devices_[d];
  if (device.is_cpu()) {
    *x = images;
    *y = labels;
    return;
  }
  const ModelConfig& model = replicas_[d]->config();
  const int64_t channels = model.input_channels > 0 ? model.input_channels : images.dim(3);
  Shape want = images.shape();
  want[3] = std::max<int64_t>(channels, images.dim(3));
  // Buffers already of the right kind are written in place (a captured step reads them).
  if (!x->defined() || x->shape() != want || x->dtype() != config_.dtype || x->device() != device) {
    *x = Tensor::Empty(want, config_.dtype, device);
  }
  if (images.device() == device) {
    // Decoded on this GPU (data/gpu_loader.h) in the model's dtype and channels: copied on
    // the device's stream into the buffer a captured step reads.
    CHECK(images.dtype() == config_.dtype && images.dim(3) == want[3])
        << "a device batch " << images.ToString() << " for a model taking " << DTypeName(config_.dtype) << " with "
        << want[3] << " channels";
    x->CopyFrom(images);
  } else if (!images.device().is_cpu()) {
    LOG(FATAL) << "a batch on " << images.device().ToString() << " for a replica on " << device.ToString();
  } else {
    StageUpload(images, want, device, x);
  }
  if (!y->defined() || y->shape() != labels.shape() || y->device() != device) {
    *y = Tensor::Empty(labels.shape(), DType::kI32, device);
  }
  Tensor staged_labels = PinnedEmpty(labels.shape(), labels.dtype());
  staged_labels.CopyFrom(labels);
  y->CopyFrom(staged_labels);
}

void Trainer::StageUpload(const Tensor& images, const Shape& want, Device device, Tensor* x) const {
  // The batch goes through page-locked memory, so that its upload is queued rather than
  // waited for (a copy from pageable memory waits for the stream); the staging block is
  // reused only once its copy has run (PinnedEmpty).
  Tensor staged = PinnedEmpty(images.shape(), images.dtype());
  staged.CopyFrom(images);
  if (want[3] > images.dim(3)) {
    Tensor converted = Tensor::Empty(images.shape(), config_.dtype, device);
    converted.CopyFrom(staged);  // uploads, then converts on the GPU
    PadLastDim(converted, x);
  } else {
    x->CopyFrom(staged);
  }
}

void Trainer::Count(const Tensor& logits, const Tensor& labels, StepStats* stats) const {
  stats->correct += TopKCorrect(logits, labels, 1);
  if (config_.top_k > 1) stats->topk_correct += TopKCorrect(logits, labels, config_.top_k);
  stats->samples += logits.dim(0);
}

Status Trainer::StepOnDevice(const Tensor& images, const Tensor& labels, StepStats* stats) {
  const int batch = static_cast<int>(images.dim(0));
  const int devices = num_devices();
  const int per_device = batch / devices;
  // With one process, as with every single-process type: the mean over its batch.
  const float grad_scale = 1.0f / static_cast<float>(batch);
  for (int d = 0; d < devices; ++d) {
    DeviceFigures& f = figures_[d];
    if (config_.reuse_device_batch && f.x.defined()) continue;
    const void* x_before = f.x.defined() ? f.x.raw_data() : nullptr;
    const void* y_before = f.y.defined() ? f.y.raw_data() : nullptr;
    PrepareSlice(d, images.Slice(d * per_device, (d + 1) * per_device),
                 labels.Slice(d * per_device, (d + 1) * per_device), &f.x, &f.y);
    // A batch of another shape has new buffers: the graph recorded the old ones. The new
    // shape runs queued once (its convolution plans are built then) before it is recorded.
    if (f.x.raw_data() != x_before || f.y.raw_data() != y_before) {
      graph_.reset();
      eager_device_steps_ = 0;
    }
  }
  last_step_ = profile::StepRecord();
  const int64_t t0 = profile::NowUs();
  // The first step runs as queued, which builds what ops build once (convolution plans,
  // workspaces); the graph records the second. Phase timings and the NaN fault hook need the
  // step's host code to run every time, so they keep it out of a graph. So do several GPUs:
  // NCCL warns that graphs of several devices launched from one thread may deadlock.
  if (graph_ == nullptr && config_.cuda_graph && eager_device_steps_ >= 1 && nan_step_ < 0 &&
      !config_.synchronize_phases && devices_.size() == 1) {
    Status recorded = DeviceGraph::Capture(devices_, [&] { QueueStep(grad_scale); }, &graph_);
    if (!recorded.ok()) {
      return Status::Internal("recording the training step as a CUDA graph: " + recorded.message() +
                              " (--cuda-graph 0 trains without one)");
    }
    TALLY_RETURN_IF_ERROR(push_status_);
  }
  if (graph_ != nullptr) {
    graph_->Launch();
    last_step_ = profile::StepRecord();  // not the recording's queueing times
    last_step_.phase(profile::Phase::kForward) = profile::NowUs() - t0;
    profile::Tracer::Get().Complete("step graph", "compute", t0, profile::NowUs() - t0);
  } else {
    QueueStep(grad_scale);
    ++eager_device_steps_;
  }
  ++step_;
  stats->samples += batch;
  return push_status_;
}

void Trainer::QueueStep(float grad_scale) {
  using profile::NowUs;
  using profile::Phase;
  const int devices = num_devices();
  push_status_ = Status::Ok();
  push_us_ = 0;
  grad_sumsq_ = -1;  // the gradients stay on the GPUs
  nan_written_ = false;
  profile::Tracer& tracer = profile::Tracer::Get();
  std::vector<Tensor> logits(devices);
  for (int d = 0; d < devices; ++d) {
    const int64_t t0 = NowUs();
    logits[d] = replicas_[d]->Forward(figures_[d].x, /*training=*/true);
    const int64_t t1 = NowUs();
    last_step_.phase(Phase::kForward) += t1 - t0;
    tracer.Complete("fwd", "compute", t0, t1 - t0, "device", d);
  }
  for (int d = 0; d < devices; ++d) {
    DeviceFigures& f = figures_[d];
    const int64_t t0 = NowUs();
    Tensor dlogits = Tensor::Empty(logits[d].shape(), logits[d].dtype(), logits[d].device());
    SoftmaxCrossEntropyAccumulate(logits[d], f.y, config_.label_smoothing, grad_scale, &f.scale, &dlogits,
                                  &f.loss_sum);
    TopKCorrectAccumulate(logits[d], f.y, 1, &f.correct);
    if (config_.top_k > 1) TopKCorrectAccumulate(logits[d], f.y, config_.top_k, &f.topk);
    if (config_.synchronize_phases) Synchronize(devices_[d]);
    const int64_t t1 = NowUs();
    replicas_[d]->Backward(dlogits);
    if (config_.synchronize_phases) Synchronize(devices_[d]);
    const int64_t t2 = NowUs();
    last_step_.phase(Phase::kForward) += t1 - t0;
    last_step_.phase(Phase::kBackward) += t2 - t1 - push_us_;
    push_us_ = 0;
    tracer.Complete("fwd", "compute", t0, t1 - t0, "device", d);
    tracer.Complete("bwd", "compute", t1, t2 - t1, "device", d);
  }
  const int64_t t_wait = NowUs();
  const Status waited = kv_->WaitAll();  // queues the sum, the check and the update
  if (push_status_.ok()) push_status_ = waited;
  LossScaleParams rule;
  rule.enabled = config_.dtype == DType::kF16;
  rule.window = config_.loss_scale.window;
  rule.min = config_.loss_scale.min;
  rule.max = config_.loss_scale.max;
  for (DeviceFigures& f : figures_) LossScaleUpdate(rule, f.found, &f.scale, &f.scaler);
  if (config_.synchronize_phases) {
    for (const Device& d : devices_) Synchronize(d);
  }
  last_step_.phase(Phase::kUpdate) = NowUs() - t_wait;
  tracer.Complete("update", "compute", t_wait, NowUs() - t_wait);
}

void Trainer::ReadStats(StepStats* stats) {
  if (!on_device_) return;
  for (size_t d = 0; d < figures_.size(); ++d) {
    DeviceFigures& f = figures_[d];
    Tensor loss = Tensor::Empty({2}, DType::kF32), counts = Tensor::Empty({2}, DType::kI32);
    loss.CopyFrom(f.loss_sum);  // waits for the device's queued steps
    counts.Slice(0, 1).CopyFrom(f.correct);
    counts.Slice(1, 2).CopyFrom(f.topk);
    stats->loss_sum += static_cast<double>(loss.data<float>()[0]) + loss.data<float>()[1];
    stats->correct += counts.data<int32_t>()[0];
    stats->topk_correct += counts.data<int32_t>()[1];
    f.loss_sum.SetZero();
    f.correct.SetZero();
    f.topk.SetZero();
    if (d == 0) {  // every device's scaler has seen the same verdicts
      Tensor scale = Tensor::Empty({1}, DType::kF32), state = Tensor::Empty({2}, DType::kI32);
      scale.CopyFrom(f.scale);
      state.CopyFrom(f.scaler);
      const int64_t skipped = state.data<int32_t>()[1];
      stats->skipped_steps += skipped - skipped_read_;
      skipped_read_ = skipped;
      scaler_.Restore(scale.data<float>()[0], state.data<int32_t>()[0], skipped);
    }
  }
}

Status Trainer::Evaluate(const Tensor& images, const Tensor& labels, StepStats* stats) {
  StepStats settled;
  TALLY_RETURN_IF_ERROR(Finish(&settled));
  Tensor x, y;
  PrepareSlice(0, images, labels, &x, &y);
  Tensor logits = replicas_[0]->Forward(x, /*training=*/false);
  stats->loss_sum += SoftmaxCrossEntropy(logits, y, 0.0f, 1.0f, nullptr);
  Count(logits, y, stats);
  return Status::Ok();
}

}  // namespace tally
