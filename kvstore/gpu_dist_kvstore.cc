#include "kvstore/gpu_dist_kvstore.h"

#include <utility>

#include "base/thread_name.h"
#include "compress/cuda/quantize.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/factories.h"

namespace tally {

GpuDistKVStore::GpuDistKVStore(std::unique_ptr<KVStore> inner, std::vector<Device> devices,
                               std::unique_ptr<Comm> comm)
    : inner_(std::move(inner)),
      inner_hooks_(inner_->trainer_hooks()),
      devices_(std::move(devices)),
      comm_(std::move(comm)),
      packed_pushes_(dynamic_cast<PackedPushes*>(inner_.get())) {
  CHECK(comm_ != nullptr && comm_->devices() == devices_);
  CHECK(packed_pushes_ != nullptr) << "the inner store takes no packed pushes";
  sender_ = std::thread([this] {
    NameThisThread("tally-gpu-push");
    SendLoop();
  });
}

GpuDistKVStore::~GpuDistKVStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  sender_.join();
}

Status GpuDistKVStore::Push(int key, const std::vector<Tensor>& vals, int priority) {
  return Status::InvalidArgument("--kv-store " + name() + " on GPUs: push key " + std::to_string(key) +
                                 " with its pull (PushPull), not alone");
}

Status GpuDistKVStore::Pull(int key, const std::vector<Tensor>& outs, int priority) {
  return Status::InvalidArgument("--kv-store " + name() + " on GPUs: pull key " + std::to_string(key) +
                                 " with its push (PushPull), not alone");
}

Status GpuDistKVStore::PushPull(int key, const std::vector<Tensor>& grads,
                                const std::vector<Tensor>& weights, int priority) {
  const std::string what = "--kv-store " + name() + " on GPUs: key " + std::to_string(key);
  if (grads.size() != devices_.size() || weights.size() != devices_.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(grads.size()) + " gradients and " +
                                   std::to_string(weights.size()) + " weights for " +
                                   std::to_string(devices_.size()) + " GPUs");
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (grads[d].device() != devices_[d] || weights[d].device() != devices_[d] ||
        grads[d].numel() != grads[0].numel() || weights[d].numel() != grads[0].numel() ||
        grads[d].dtype() != grads[0].dtype() || weights[d].dtype() != weights[0].dtype()) {
      return Status::InvalidArgument(what + ": device " + std::to_string(d) + " gives gradient " +
                                     grads[d].ToString() + " and weights " + weights[d].ToString() +
                                     ", expected both on " + devices_[d].ToString() + " and like device 0's");
    }
  }
  if (pending_.count(key) != 0 || uploaded_.count(key) != 0) {
    return Status::InvalidArgument(what + " pushed twice before WaitAll");
  }
  Staged& staged = staged_[key];
  if (!staged.grad.defined() || staged.grad.dtype() != grads[0].dtype()) {
    staged.grad = PinnedEmpty(grads[0].shape(), grads[0].dtype());
  }
  if (!staged.weight.defined() || staged.weight.dtype() != weights[0].dtype()) {
    staged.weight = PinnedEmpty(weights[0].shape(), weights[0].dtype());
  }
  const Tensor sum = comm_->Reduce(key, grads);  // in place on every GPU: device 0's is pushed
  Send send;
  send.key = key;
  send.priority = priority;
  if (gc_.enabled()) {
    TALLY_RETURN_IF_ERROR(QueueQuantized(key, sum, &staged, &send));
  } else {
    send.copied = CopyToHostAsync(sum, &staged.grad);
  }
  send.buffers = staged;
  pending_[key] = weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(send));
  }
  cv_.notify_all();
  return Status::Ok();
}

void GpuDistKVStore::SendLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to hand over
    Send send = std::move(queue_.front());
    queue_.pop_front();
    sending_ = true;
    const bool failed = !send_status_.ok();
    lock.unlock();
    Status s;
    if (!failed) {  // after a failure the step is lost: the rest is dropped, WaitAll says why
      send.copied.Wait();
      s = send.sum.defined() ? SendPacked(send)
                             : inner_->PushPull(send.key, {send.buffers.grad}, {send.buffers.weight}, send.priority);
    }
    lock.lock();
    if (send_status_.ok() && !s.ok()) send_status_ = s;
    sending_ = false;
    cv_.notify_all();
  }
}

Status GpuDistKVStore::SetGradientCompression(const CompressionConfig& config) {
  TALLY_RETURN_IF_ERROR(inner_->SetGradientCompression(config));
  gc_ = config;
  return Status::Ok();
}

Status GpuDistKVStore::SetGradientScale(float scale) {
  TALLY_RETURN_IF_ERROR(inner_hooks_->SetGradientScale(scale));
  loss_scale_ = scale;
  return Status::Ok();
}

Status GpuDistKVStore::QueueQuantized(int key, const Tensor& sum, Staged* staged, Send* send) {
  const Tensor flat = sum.Reshape({sum.numel()});
  if (!staged->residual.defined()) {  // the key's first push: its buffers, kept for every later one
    std::vector<Placement::Slice> slices;
    TALLY_RETURN_IF_ERROR(packed_pushes_->KeySlices(key, &slices));
    staged->layout = PackedLayout(gc_.type, SliceSpans(slices));
    const int64_t bytes = slices.empty() ? 0 : staged->layout.back().byte_offset + staged->layout.back().bytes;
    const int64_t count = static_cast<int64_t>(slices.size());
    staged->residual = Tensor::Zeros({flat.numel()}, DType::kF32, devices_[0]);
    staged->packed_dev = Tensor::Empty({bytes}, DType::kU8, devices_[0]);
    staged->nonfinite_dev = Tensor::Empty({count}, DType::kI32, devices_[0]);
    staged->packed = PinnedEmpty({bytes}, DType::kU8);
    staged->nonfinite = PinnedEmpty({count}, DType::kI32);
  }
  QuantizeSlicesOnGpu(gc_, flat, loss_scale_, staged->layout, &staged->residual, &staged->packed_dev,
                      &staged->nonfinite_dev);
  CopyToHostAsync(staged->packed_dev, &staged->packed);
  send->copied = CopyToHostAsync(staged->nonfinite_dev, &staged->nonfinite);  // after the bits, on one stream
  send->sum = flat;
  return Status::Ok();
}

Status GpuDistKVStore::SendPacked(const Send& send) {
  const Staged& b = send.buffers;
  std::vector<Tensor> packed = SplitPacked(b.layout, b.packed, b.nonfinite);
  for (const Tensor& p : packed) {
    if (p.defined()) continue;
    Tensor raw = b.grad.Reshape({b.grad.numel()});  // a slice is not finite: its values go as they are
    CopyToHostAsync(send.sum, &raw).Wait();
    break;
  }
  return packed_pushes_->PushPullPacked(send.key, packed, b.grad.Reshape({b.grad.numel()}), {b.weight},
                                        send.priority);
}

Status GpuDistKVStore::Drain(bool keep_status) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && !sending_; });
  Status s = send_status_;
  if (!keep_status) send_status_ = Status::Ok();
  return s;
}

Status GpuDistKVStore::WaitKey(int key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return Status::Ok();  // not pushed this step, or uploaded already
  TALLY_RETURN_IF_ERROR(Drain(/*keep_status=*/true));
  TALLY_RETURN_IF_ERROR(inner_->WaitKey(key));
  comm_->Broadcast(staged_.at(key).weight, it->second);  // queued: page-locked host to device
  uploaded_.insert(pending_.extract(it));
  return Status::Ok();
}

Status GpuDistKVStore::WaitAll() {
  Status sent = Drain();
  Status waited = inner_->WaitAll();
  std::map<int, std::vector<Tensor>> pending = std::move(pending_);
  std::map<int, std::vector<Tensor>> uploaded = std::move(uploaded_);
  pending_.clear();
  uploaded_.clear();
  TALLY_RETURN_IF_ERROR(sent);
  TALLY_RETURN_IF_ERROR(waited);
  // A skipped step's weights were restored into the host buffers after WaitKey uploaded them.
  if (inner_hooks_->TakeSkippedStep(&skipped_)) {
    has_skipped_ = true;
    pending.merge(uploaded);
  }
  for (auto& [key, weights] : pending) {
    comm_->Broadcast(staged_.at(key).weight, weights);  // queued: page-locked host to device
  }
  return Status::Ok();
}

bool GpuDistKVStore::TakeSkippedStep(SkippedStep* out) {
  if (!has_skipped_) return false;
  *out = skipped_;
  has_skipped_ = false;
  return true;
}

Status NewDistKVStoreOnGpus(KVStoreType type, const std::vector<Device>& devices, Cluster* cluster,
                            std::unique_ptr<KVStore>* out) {
  if (devices.empty()) {
    return Status::InvalidArgument("--kv-store " + KVStoreTypeName(type) + " on GPUs needs at least one GPU");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    TALLY_RETURN_IF_ERROR(CheckDevice(devices[i]));
    if (devices[i].is_cpu()) return Status::InvalidArgument(devices[i].ToString() + " is not a GPU");
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) return Status::InvalidArgument(devices[i].ToString() + " is named twice");
    }
  }
  std::unique_ptr<KVStore> inner;
  TALLY_RETURN_IF_ERROR(NewDistKVStore(type, /*num_devices=*/1, cluster, &inner));
  std::unique_ptr<Comm> comm;
  TALLY_RETURN_IF_ERROR(NewComm(devices, MergedDType::kAsValues, &comm));
  out->reset(new GpuDistKVStore(std::move(inner), devices, std::move(comm)));
  return Status::Ok();
}

}  // namespace tally
