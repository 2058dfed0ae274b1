#include "kvstore/gpu_kvstore.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "kvstore/factories.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "profile/records.h"

namespace tally {
namespace {

std::string DeviceList(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) s += (s.empty() ? "" : ",") + d.ToString();
  return s;
}

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

Tensor HostF32(const Tensor& t) {
  Tensor h = Tensor::Empty(t.shape(), DType::kF32);
  h.CopyFrom(t);  // waits for the device
  return h;
}

}  // namespace

Status NewGpuKVStore(KVStoreType type, const std::vector<Device>& devices, std::unique_ptr<KVStore>* out) {
  if (IsDistributed(type)) {
    return Status::InvalidArgument("--kv-store " + KVStoreTypeName(type) + " on GPUs: only local and device run "
                                   "within one process (the dist_* types are made with the job's Cluster)");
  }
  const std::string name = "--kv-store " + KVStoreTypeName(type) + " on GPUs";
  if (devices.empty()) return Status::InvalidArgument(name + ": --gpus names no GPU");
  std::set<int> seen;
  for (const Device& d : devices) {
    if (d.is_cpu()) {
      return Status::InvalidArgument(name + ": --gpus gives " + d.ToString() + ", not a GPU");
    }
    if (!seen.insert(d.index).second) {
      return Status::InvalidArgument(name + ": --gpus gives " + d.ToString() + " twice");
    }
  }
  for (const Device& d : devices) {
    const Status s = CheckDevice(d);  // its message names the device and why
    if (!s.ok()) {
      const std::string msg = name + ": --gpus: " + s.message();
      return s.code() == Status::Code::kUnavailable ? Status::Unavailable(msg) : Status::InvalidArgument(msg);
    }
  }
  std::unique_ptr<Comm> comm;
  const Status s = NewComm(devices, MergedDType::kAsValues, &comm);
  if (!s.ok()) return Status::Unavailable(name + ": " + s.message());
  out->reset(new GpuKVStore(type, devices, std::move(comm)));
  return Status::Ok();
}

GpuKVStore::GpuKVStore(KVStoreType type, std::vector<Device> devices, std::unique_ptr<Comm> comm)
    : type_(type), devices_(std::move(devices)), comm_(std::move(comm)) {
  CHECK(!devices_.empty());
  CHECK(comm_ != nullptr && comm_->devices() == devices_) << Name();
}

std::string GpuKVStore::Name() const { return "--kv-store " + name() + " on " + DeviceList(devices_); }

Status GpuKVStore::SetOptimizer(const OptimizerConfig& config) {
  TALLY_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  if (config.type != "sgd" && config.type != "nag") {
    return Status::InvalidArgument("--optimizer " + config.type + ": " + Name() +
                                   " updates with sgd or nag; the other optimizers run on the CPU (--kv-store local, "
                                   "or the servers of dist_sync)");
  }
  if (!entries_.empty()) return Status::InvalidArgument("SetOptimizer must come before Init");
  config_ = config;
  has_optimizer_ = true;
  return Status::Ok();
}

Status GpuKVStore::Init(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  return InitEach(keys, values, [this](int key, const Tensor& value) { return InitKey(key, value); });
}

Status GpuKVStore::InitKey(int key, const Tensor& value) {
  const std::string what = Name() + ": Init of key " + std::to_string(key);
  if (!has_optimizer_) {
    // The state Init allocates depends on the optimizer, and on GPUs the store only ever
    // applies one (the weights are the model's own tensors, not a value it stores).
    return Status::InvalidArgument(what + " before SetOptimizer");
  }
  if (key < 0) return Status::InvalidArgument(what + ": the key is negative");
  if (entries_.count(key)) return Status::InvalidArgument(what + ": the key is initialised twice");
  if (!value.defined() || !IsFloat(value.dtype())) {
    return Status::InvalidArgument(what + ": " + (value.defined() ? value.ToString() : std::string("no value")) +
                                   " is not float32, float16 or bfloat16");
  }
  Entry& e = entries_[key];
  e.shape = value.shape();
  e.dtype = value.dtype();
  e.replicas.resize(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    Replica& r = e.replicas[d];
    if (config_.momentum > 0) r.mom = Tensor::Zeros(e.shape, DType::kF32, devices_[d]);
    if (e.dtype != DType::kF32) {
      r.master = Tensor::Empty(e.shape, DType::kF32, devices_[d]);
      r.master.CopyFrom(d == 0 ? value : e.replicas[0].master);
    }
  }
  // Not a copy: until the first push, what GetMasterWeights reads for an fp32 key.
  if (e.dtype == DType::kF32) e.replicas[0].weight = value;
  return Status::Ok();
}

Status GpuKVStore::Push(int key, const std::vector<Tensor>& vals, int priority) {
  return Status::InvalidArgument(Name() + ": Push alone is not supported (key " + std::to_string(key) +
                                 "); push gradients with PushPull");
}

Status GpuKVStore::Pull(int key, const std::vector<Tensor>& outs, int priority) {
  return Status::InvalidArgument(Name() + ": Pull alone is not supported (key " + std::to_string(key) +
                                 "); the weights pushed with PushPull are updated in place");
}

Status GpuKVStore::Find(int key, const char* what, Entry** entry) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return Status::InvalidArgument(Name() + ": " + what + " of key " + std::to_string(key) + " before Init");
  }
  *entry = &it->second;
  return Status::Ok();
}

Status GpuKVStore::CheckPush(int key, const Entry& e, const std::vector<Tensor>& grads,
                             const std::vector<Tensor>& weights) const {
  const std::string what = Name() + ": push of key " + std::to_string(key);
  if (grads.size() != devices_.size() || weights.size() != devices_.size()) {
    return Status::InvalidArgument(what + " with " + std::to_string(grads.size()) + " gradients and " +
                                   std::to_string(weights.size()) + " weights for " +
                                   std::to_string(devices_.size()) + " devices");
  }
  if (e.pending) return Status::InvalidArgument(what + ": pushed twice in one step (WaitAll ends a step)");
  const int64_t n = NumElements(e.shape);
  for (size_t d = 0; d < devices_.size(); ++d) {
    const Tensor& g = grads[d];
    const Tensor& w = weights[d];
    if (!g.defined() || !w.defined()) return Status::InvalidArgument(what + ": an undefined tensor");
    if (w.device() != devices_[d] || g.device() != devices_[d] || w.dtype() != e.dtype ||
        w.numel() != n || g.numel() != n) {
      return Status::InvalidArgument(what + ": gradient " + g.ToString() + " and weight " + w.ToString() +
                                     " for " + devices_[d].ToString() + ", a " + DTypeName(e.dtype) +
                                     ShapeString(e.shape) + " key");
    }
    // NCCL sums one dtype across the devices, and MultiSgdUpdate takes an fp32 weight's
    // gradient in fp32 only.
    const bool dtype_ok = g.dtype() == grads[0].dtype() &&
                          (g.dtype() == DType::kF32 || g.dtype() == e.dtype);
    if (!dtype_ok) {
      return Status::InvalidArgument(what + ": gradient " + g.ToString() + " on " + devices_[d].ToString() +
                                     " for " + DTypeName(e.dtype) + " weights (gradients on every device "
                                     "are float32 or the weights' dtype, all the same)");
    }
  }
  return Status::Ok();
}

Status GpuKVStore::PushPull(int key, const std::vector<Tensor>& grads, const std::vector<Tensor>& weights,
                            int /*priority*/) {
  Entry* e = nullptr;
  TALLY_RETURN_IF_ERROR(Find(key, "push", &e));
  TALLY_RETURN_IF_ERROR(CheckPush(key, *e, grads, weights));
  for (size_t d = 0; d < devices_.size(); ++d) {
    e->replicas[d].grad = grads[d];
    e->replicas[d].weight = weights[d];
  }
  // The step's gradients were scaled by the scale in force when it began (trainer_hooks.h: a new
  // scale applies from the next push), not by one set between its pushes and WaitAll.
  if (pending_.empty()) step_scale_ = gradient_scale_;
  e->pending = true;
  ++e->pushes;
  pending_.push_back(key);
  return Status::Ok();
}

Status GpuKVStore::WaitAll() {
  if (pending_.empty()) return Status::Ok();
  // Key order, not push order: the same NCCL group and the same update whatever order the
  // backward pass produced the gradients in.
  std::sort(pending_.begin(), pending_.end());
  std::vector<std::vector<Tensor>> grads;
  grads.reserve(pending_.size());
  for (int key : pending_) {
    std::vector<Tensor> per_device;
    for (const Replica& r : entries_.at(key).replicas) per_device.push_back(r.grad);
    grads.push_back(std::move(per_device));
  }
  std::vector<int> raw_keys = pending_;
  std::vector<std::vector<Tensor>> raw_grads = grads;
  if (gc_.enabled()) CompressedSums(grads, &raw_keys, &raw_grads);
  // In place: every replica's grad then holds the sum.
  if (!raw_keys.empty()) comm_->Reduce(raw_keys, raw_grads);
  if (!device_state_.empty()) {
    Update();  // each device checks its own sums, and its update reads the verdict
  } else if (AllFinite(DeviceSums(0))) {  // every device holds the same sums: device 0's verdict is all's
    Update();
  } else {
    skipped_ = SkippedStep();
    skipped_.key = LowestNonFiniteKey();
    skipped_.step = entries_.at(skipped_.key).pushes - 1;
    has_skipped_ = true;
  }
  for (int key : pending_) {
    Entry& e = entries_.at(key);
    e.pending = false;
    for (Replica& r : e.replicas) r.grad = Tensor();  // the caller's buffer, not ours to hold
  }
  pending_.clear();
  return Status::Ok();
}

Status GpuKVStore::SetGradientCompression(const CompressionConfig& config) {
  if (config.enabled() && type_ != KVStoreType::kDevice) {
    return Status::InvalidArgument("gradient compression needs the device kvstore or a dist_* one, not " + Name());
  }
  for (const auto& [key, e] : entries_) {
    if (e.pushes > 0) return Status::InvalidArgument("gradient compression must be set before the first push");
  }
  gc_ = config;
  return Status::Ok();
}

void GpuKVStore::CompressedSums(const std::vector<std::vector<Tensor>>& grads, std::vector<int>* raw_keys,
                                std::vector<std::vector<Tensor>>* raw_grads) {
  std::vector<GpuCompressedKey*> states;
  for (int key : pending_) states.push_back(&entries_.at(key).compressed);
  std::vector<bool> done;
  GpuCompressedReduce(gc_, devices_, grads, states, &done);
  raw_keys->clear();
  raw_grads->clear();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Entry& e = entries_.at(pending_[i]);
    if (!done[i]) {
      raw_keys->push_back(pending_[i]);
      raw_grads->push_back(grads[i]);
      continue;
    }
    for (size_t d = 0; d < devices_.size(); ++d) e.replicas[d].grad = e.compressed.sums[d];
  }
}

std::vector<Tensor> GpuKVStore::DeviceSums(size_t d) const {
  std::vector<Tensor> sums;
  sums.reserve(pending_.size());
  for (int key : pending_) sums.push_back(entries_.at(key).replicas[d].grad);
  return sums;
}

int GpuKVStore::LowestNonFiniteKey() {
  // Only on a skipped step, so one wait per key costs nothing that matters.
  for (int key : pending_) {
    if (!AllFinite({entries_.at(key).replicas[0].grad})) return key;
  }
  LOG(FATAL) << Name() << ": the step's gradients are not all finite, yet each key's is";
  abort();
}

void GpuKVStore::Update() {
  const int64_t t0 = profile::NowUs();
  // A step kept on the device divides by its loss scale in the update kernel.
  const SgdParams p = ToSgdParams(config_, device_state_.empty() ? step_scale_ : 1.0f);
  std::vector<SgdSlot> slots(pending_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Entry& e = entries_.at(pending_[i]);
      const Replica& r = e.replicas[d];
      SgdSlot& s = slots[i];
      s.grad = r.grad;
      s.weight = r.weight;
      s.master = r.master;
      s.mom = r.mom;
      s.wd_mult = config_.no_wd_keys.count(pending_[i]) != 0 ? 0.0f : 1.0f;  // --wd-exclude
      // Without multi_precision the 16-bit weight is the truth: the update starts from it,
      // as the CPU's Updater does (a conversion on the device's stream, no allocation).
      if (r.master.defined() && !config_.multi_precision) s.master.CopyFrom(r.weight);
    }
    if (device_state_.empty()) {
      MultiSgdUpdate(p, slots);
      continue;
    }
    SgdStepScalars scalars;
    scalars.lr = device_lr_[d];
    scalars.grad_scale = device_state_[d].loss_scale;
    scalars.found = device_state_[d].found;
    NonFiniteFlag(DeviceSums(d), &scalars.found);
    MultiSgdUpdate(p, slots, scalars);
  }
  times_.update_us += profile::NowUs() - t0;
}

void GpuKVStore::SetLearningRate(float lr) {
  config_.lr = lr;
  for (Tensor& t : device_lr_) t.Fill(lr);  // queued: steps queued later read it
}

Status GpuKVStore::KeepStepOnDevice(const std::vector<DeviceStepState>& per_device) {
  TALLY_RETURN_IF_ERROR(RefuseWhilePending("KeepStepOnDevice"));
  if (per_device.size() != devices_.size()) {
    return Status::InvalidArgument(Name() + ": KeepStepOnDevice with " + std::to_string(per_device.size()) +
                                   " device states for " + std::to_string(devices_.size()) + " GPUs");
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    const Tensor& scale = per_device[d].loss_scale;
    const Tensor& found = per_device[d].found;
    if (!scale.defined() || scale.numel() != 1 || scale.dtype() != DType::kF32 || scale.device() != devices_[d] ||
        !found.defined() || found.numel() != 1 || found.dtype() != DType::kI32 || found.device() != devices_[d]) {
      return Status::InvalidArgument(Name() + ": KeepStepOnDevice wants an fp32 [1] loss scale and an int32 [1] "
                                     "flag on " + devices_[d].ToString() + " for device " + std::to_string(d));
    }
  }
  device_state_ = per_device;
  device_lr_.clear();
  for (const Device& d : devices_) {
    device_lr_.push_back(Tensor::Empty({1}, DType::kF32, d));
    device_lr_.back().Fill(config_.lr);
  }
  return Status::Ok();
}

bool GpuKVStore::TakeSkippedStep(SkippedStep* out) {
  if (!has_skipped_) return false;
  *out = skipped_;
  has_skipped_ = false;
  return true;
}

Status GpuKVStore::SetGradientScale(float scale) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    return Status::InvalidArgument(Name() + ": gradient scale " + std::to_string(scale) +
                                   " (it must be positive and finite)");
  }
  gradient_scale_ = scale;
  return Status::Ok();
}

Status GpuKVStore::RefuseWhilePending(const char* what) const {
  if (pending_.empty()) return Status::Ok();
  return Status::InvalidArgument(Name() + ": " + what + " while " + std::to_string(pending_.size()) +
                                 " pushed keys wait for WaitAll");
}

Status GpuKVStore::GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) {
  TALLY_RETURN_IF_ERROR(RefuseWhilePending("GetOptimizerState"));
  states->assign(keys.size(), Tensor());
  for (size_t i = 0; i < keys.size(); ++i) {
    Entry* e = nullptr;
    TALLY_RETURN_IF_ERROR(Find(keys[i], "optimizer state", &e));
    // Every device applied the same updates: device 0 speaks for all.
    if (e->replicas[0].mom.defined()) (*states)[i] = HostF32(e->replicas[0].mom);
  }
  return Status::Ok();
}

Status GpuKVStore::SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) {
  TALLY_RETURN_IF_ERROR(RefuseWhilePending("SetOptimizerState"));
  if (keys.size() != states.size()) {
    return Status::InvalidArgument(Name() + ": optimizer state: keys and states differ in number");
  }
  // Every key is checked before any is written, so a refusal leaves the state as it was.
  std::vector<Entry*> entries(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    TALLY_RETURN_IF_ERROR(Find(keys[i], "optimizer state", &entries[i]));
    const Tensor& mom = entries[i]->replicas[0].mom;
    const std::string what = Name() + ": optimizer state of key " + std::to_string(keys[i]);
    if (!mom.defined()) {
      if (states[i].defined()) return Status::InvalidArgument(what + " given, but --mom is 0");
      continue;
    }
    if (!states[i].defined() || states[i].numel() != mom.numel() || !IsFloat(states[i].dtype())) {
      return Status::InvalidArgument(what + ": " + (states[i].defined() ? states[i].ToString() : std::string("none")) +
                                     " for " + mom.ToString());
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    for (Replica& r : entries[i]->replicas) {
      if (r.mom.defined()) r.mom.CopyFrom(states[i]);
    }
  }
  return Status::Ok();
}

Status GpuKVStore::GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) {
  TALLY_RETURN_IF_ERROR(RefuseWhilePending("GetMasterWeights"));
  out->assign(keys.size(), Tensor());
  for (size_t i = 0; i < keys.size(); ++i) {
    Entry* e = nullptr;
    TALLY_RETURN_IF_ERROR(Find(keys[i], "master weights", &e));
    const Replica& r = e->replicas[0];
    if (e->dtype == DType::kF32) {
      (*out)[i] = HostF32(r.weight).Reshape(e->shape);
    } else if (config_.multi_precision) {
      (*out)[i] = HostF32(r.master);
    } else {
      return Status::InvalidArgument(Name() + ": no fp32 master weights of " + DTypeName(e->dtype) +
                                     " key " + std::to_string(keys[i]) + " without multi_precision");
    }
  }
  return Status::Ok();
}

Status GpuKVStore::SetMasterWeights(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  TALLY_RETURN_IF_ERROR(RefuseWhilePending("SetMasterWeights"));
  if (keys.size() != values.size()) {
    return Status::InvalidArgument(Name() + ": " + std::to_string(keys.size()) + " keys but " +
                                   std::to_string(values.size()) + " master weights");
  }
  std::vector<Entry*> entries;
  for (size_t i = 0; i < keys.size(); ++i) {  // every key checked before any is written
    Entry* e = nullptr;
    TALLY_RETURN_IF_ERROR(Find(keys[i], "master weights", &e));
    const Tensor& v = values[i];
    if (v.dtype() != DType::kF32 || v.numel() != NumElements(e->shape)) {
      return Status::InvalidArgument(Name() + ": master weights of key " + std::to_string(keys[i]) + " are " +
                                     v.ToString() + ", not float32" + ShapeString(e->shape));
    }
    if (e->dtype != DType::kF32 && !config_.multi_precision) {
      return Status::InvalidArgument(Name() + ": no fp32 master weights of " + DTypeName(e->dtype) +
                                     " key " + std::to_string(keys[i]) + " without multi_precision");
    }
    entries.push_back(e);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    for (Replica& r : entries[i]->replicas) {
      Tensor& target = entries[i]->dtype == DType::kF32 ? r.weight : r.master;
      if (target.defined()) target.CopyFrom(values[i].Reshape(target.shape()));
    }
  }
  return Status::Ok();
}

TrainerHooks::Times GpuKVStore::TakeTimes() {
  Times t = times_;
  // The update runs inside WaitAll, which the Trainer times as the wait.
  t.on_caller_thread = false;
  times_ = Times();
  return t;
}

}  // namespace tally
