// Trainer's step that waits on the host (trainer.h): every replica's forward pass, the loss,
// the backward passes whose gradients are pushed as they are final, and settling the
// kvstore's work (at the step's end, or with overlap during the next forward pass). The
// device-resident step (StepOnDevice) and the rest of Trainer are in trainer.cc.
#include <cmath>
#include <limits>

#include "ops/device.h"
#include "base/fault_hooks.h"
#include "ops/ops.h"
#include "profile/trace.h"
#include "worker/trainer.h"

namespace tally {
namespace {

// Sum of squares of the devices' sum of one gradient (fp32 only; -1 otherwise).
double GradientSumSquares(const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads) {
    if (g.dtype() != DType::kF32 || !g.device().is_cpu()) return -1;
  }
  const int64_t n = grads[0].numel();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    for (const Tensor& g : grads) v += g.data<float>()[i];
    total += static_cast<double>(v) * v;
  }
  return total;
}

}  // namespace

Status Trainer::Step(const Tensor& images, const Tensor& labels, StepStats* stats) {
  const int batch = static_cast<int>(images.dim(0));
  TALLY_RETURN_IF_ERROR(CheckBatchSplit(batch, num_devices()));
  if (on_device_) return StepOnDevice(images, labels, stats);
  push_status_ = Status::Ok();
  needed_status_ = Status::Ok();
  push_us_ = 0;
  key_wait_us_ = 0;
  grad_sumsq_ = 0;
  nan_written_ = false;
  skipped_ = false;
  last_step_ = profile::StepRecord();
  std::vector<Tensor> logits, targets;
  // With the last step still in flight, replica 0's forward pass waits for each weight just
  // before its layer (WaitForKey); once it is over every pull is in, and the last step is
  // settled. A skipped one had its weights restored meanwhile: the forward pass runs again.
  const bool settle = in_flight_;
  Forward(images, labels, &logits, &targets);
  if (settle) {
    TALLY_RETURN_IF_ERROR(needed_status_);
    TALLY_RETURN_IF_ERROR(Settle(stats));
    if (skipped_) Forward(images, labels, &logits, &targets);
  }
  BackwardAndPush(batch, logits, targets, stats);
  TALLY_RETURN_IF_ERROR(push_status_);
  ++step_;
  if (overlap_) {
    RecordStoreTimes(0);
    in_flight_ = true;
    return Status::Ok();
  }
  return Settle(stats);
}

Status Trainer::Finish(StepStats* stats) {
  if (!in_flight_) return Status::Ok();
  skipped_ = false;
  return Settle(stats);
}

Status Trainer::Settle(StepStats* stats) {
  const int64_t t_wait = profile::NowUs();
  Status waited = kv_->WaitAll();
  if (config_.synchronize_phases) {
    for (const Device& d : devices_) Synchronize(d);  // the GPU kvstore's update, queued by WaitAll
  }
  const int64_t wait = profile::NowUs() - t_wait;
  profile::Tracer::Get().Complete("wait", "comm", t_wait, wait);
  const bool was_in_flight = in_flight_;
  in_flight_ = false;
  if (!was_in_flight) RecordStoreTimes(wait);
  else last_step_.phase(profile::Phase::kWait) += wait;
  TALLY_RETURN_IF_ERROR(waited);
  stop_agreed_ = hooks_->StopAgreed();
  skipped_ = hooks_->TakeSkippedStep(&last_skip_);
  // The step settled is the last one Step began: step_ has counted it already.
  skipped_step_ = step_ - 1;
  if (skipped_) stats->skipped_steps += 1;
  scaler_.Update(skipped_);
  return TellJoiners();
}

void Trainer::Forward(const Tensor& images, const Tensor& labels, std::vector<Tensor>* logits,
                      std::vector<Tensor>* targets) {
  using profile::NowUs;
  using profile::Phase;
  const int devices = num_devices();
  const int per_device = static_cast<int>(images.dim(0)) / devices;
  const bool keep_batch = config_.reuse_device_batch && !devices_[0].is_cpu();
  const bool have_batch = keep_batch && static_cast<int>(device_images_.size()) == devices;
  logits->assign(devices, Tensor());
  targets->assign(devices, Tensor());
  // Every replica's forward pass is queued before any loss is read back (which waits for
  // its device), so that GPUs compute their forward passes at the same time.
  for (int d = 0; d < devices; ++d) {
    Tensor x;
    if (have_batch) {
      x = device_images_[d];
      (*targets)[d] = device_labels_[d];
    } else {
      PrepareSlice(d, images.Slice(d * per_device, (d + 1) * per_device),
                   labels.Slice(d * per_device, (d + 1) * per_device), &x, &(*targets)[d]);
      if (keep_batch && static_cast<int>(device_images_.size()) < devices) {
        device_images_.push_back(x);
        device_labels_.push_back((*targets)[d]);
      }
    }
    const int64_t t0 = NowUs();
    const int64_t waited_before = key_wait_us_;
    (*logits)[d] = replicas_[d]->Forward(x, /*training=*/true);
    const int64_t t1 = NowUs();
    last_step_.phase(Phase::kForward) += t1 - t0 - (key_wait_us_ - waited_before);
    profile::Tracer::Get().Complete("fwd", "compute", t0, t1 - t0, "device", d);
  }
}

void Trainer::BackwardAndPush(int batch, const std::vector<Tensor>& logits, const std::vector<Tensor>& targets,
                              StepStats* stats) {
  using profile::NowUs;
  using profile::Phase;
  // The mean over the global batch: synchronous types sum every worker's gradients on the
  // servers; dist_async applies each worker's push on its own (MXNet's rescale_grad).
  const bool global = IsDistributedSync(kv_->type());
  const float grad_scale =
      1.0f / (static_cast<float>(batch) * static_cast<float>(global ? kv_->num_workers() : 1));
  // fp16: the loss's gradient is scaled up, and the kvstore's update divides it back. Read
  // after the last step was settled: an overflow there has halved it.
  const float loss_scale = scaler_.scale();
  push_status_ = hooks_->SetGradientScale(loss_scale);
  if (!push_status_.ok()) return;
  profile::Tracer& tracer = profile::Tracer::Get();
  // The last replica's backward pass pushes each gradient as soon as it is final
  // (PushGradient, through the network's callback): the earlier replicas are done by then.
  for (int d = 0; d < num_devices(); ++d) {
    const int64_t t0 = NowUs();
    Tensor dlogits = Tensor::Empty(logits[d].shape(), logits[d].dtype(), logits[d].device());
    stats->loss_sum += SoftmaxCrossEntropy(logits[d], targets[d], config_.label_smoothing,
                                           grad_scale * loss_scale, &dlogits);
    Count(logits[d], targets[d], stats);
    if (config_.synchronize_phases) Synchronize(devices_[d]);
    const int64_t t1 = NowUs();
    replicas_[d]->Backward(dlogits);
    if (config_.synchronize_phases) Synchronize(devices_[d]);
    const int64_t t2 = NowUs();
    last_step_.phase(Phase::kForward) += t1 - t0;  // the loss and the accuracy count
    last_step_.phase(Phase::kBackward) += t2 - t1;
    tracer.Complete("fwd", "compute", t0, t1 - t0, "device", d);  // its loss and accuracy
    tracer.Complete("bwd", "compute", t1, t2 - t1, "device", d);
  }
}

void Trainer::WaitForKey(int key) {
  if (!in_flight_ || !needed_status_.ok()) return;
  const int64_t t0 = profile::NowUs();
  needed_status_ = kv_->WaitKey(key);
  const int64_t dur = profile::NowUs() - t0;
  key_wait_us_ += dur;
  last_step_.phase(profile::Phase::kWait) += dur;
  if (dur > 0) profile::Tracer::Get().Complete("wait", "comm", t0, dur, "key", key);
}

void Trainer::RecordStoreTimes(int64_t wait) {
  using profile::Phase;
  // The pushes ran inside the backward pass; with a single-process kvstore, so did the
  // optimizer and the copies back.
  const TrainerHooks::Times kv = hooks_->TakeTimes();
  int64_t push = push_us_;
  if (kv.on_caller_thread) push -= kv.pull_us + kv.update_us;
  last_step_.phase(Phase::kBackward) -= push_us_;
  last_step_.phase(Phase::kPush) = push;
  last_step_.phase(Phase::kPull) = kv.pull_us;
  last_step_.phase(Phase::kUpdate) = kv.update_us;
  last_step_.phase(Phase::kWait) += wait;
  last_step_.grad_norm = grad_sumsq_ >= 0 ? std::sqrt(grad_sumsq_) : -1;
}

void Trainer::InjectNan(const std::vector<Tensor>& grads) {
  if (step_ != nan_step_ || (nan_written_ && !nan_all_)) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (nan_all_) {
    for (const Tensor& g : grads) {
      Tensor t = g;
      t.Fill(nan);
    }
  } else {
    Tensor first = grads[0].Reshape({grads[0].numel()}).Slice(0, 1);  // any device and dtype
    first.Fill(nan);
  }
  nan_written_ = true;
}

void Trainer::PushGradient(int key) {
  if (!push_status_.ok()) return;
  const int devices = num_devices();
  std::vector<Tensor> grads(devices), weights(devices);
  for (int d = 0; d < devices; ++d) {
    Parameter* p = replicas_[d]->Parameters()[key];
    grads[d] = p->grad;
    weights[d] = p->value;
  }
  InjectNan(grads);
  if (grad_sumsq_ >= 0) {
    const double sq = GradientSumSquares(grads);
    grad_sumsq_ = sq < 0 ? -1 : grad_sumsq_ + sq;
  }
  // Keys of the first layers go first: the next forward pass needs them first.
  const int64_t t0 = profile::NowUs();
  push_status_ = kv_->PushPull(key, grads, weights, /*priority=*/-key);
  const int64_t dur = profile::NowUs() - t0;
  push_us_ += dur;
  profile::Tracer::Get().Complete("push", "comm", t0, dur, "key", key);
}

}  // namespace tally
