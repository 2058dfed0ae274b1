#include "kvstore/local_kvstore.h"

#include <algorithm>
#include <utility>

#include "kvstore/compressed_reduce.h"
#include "kvstore/factories.h"
#include "optim/reduce.h"
#include "profile/records.h"

namespace tally {

namespace {

std::unique_ptr<Comm> HostComm(int num_devices) {
  std::unique_ptr<Comm> comm;
  const Status s = NewComm(std::vector<Device>(num_devices, Device::Cpu()), MergedDType::kFloat32, &comm);
  CHECK(s.ok()) << s;  // host devices, at least one (KVStore::Create checks)
  return comm;
}

}  // namespace

LocalKVStore::LocalKVStore(int num_devices, bool update_on_devices)
    : num_devices_(num_devices),
      update_on_devices_(update_on_devices),
      type_(update_on_devices ? KVStoreType::kDevice : KVStoreType::kLocal),
      comm_(HostComm(num_devices)) {}

Status LocalKVStore::SetOptimizer(const OptimizerConfig& config) {
  TALLY_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  if (!entries_.empty()) return Status::InvalidArgument("SetOptimizer must come before Init");
  updaters_.clear();
  int copies = update_on_devices_ ? num_devices_ : 1;
  for (int i = 0; i < copies; ++i) updaters_.push_back(std::make_unique<Updater>(config));
  optimizer_ = config;
  return Status::Ok();
}

void LocalKVStore::SetLearningRate(float lr) {
  for (auto& u : updaters_) u->set_learning_rate(lr);
}

Status LocalKVStore::Init(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  return InitEach(keys, values, [this](int key, const Tensor& value) { return InitKey(key, value); });
}

Status LocalKVStore::InitKey(int key, const Tensor& value) {
  if (key < 0) return Status::InvalidArgument("kvstore key " + std::to_string(key) + " is negative");
  if (entries_.count(key)) return Status::InvalidArgument("kvstore key " + std::to_string(key) + " initialised twice");
  if (!value.defined()) return Status::InvalidArgument("kvstore Init of key " + std::to_string(key) + " without a value");
  Entry& e = entries_[key];
  int copies = update_on_devices_ ? num_devices_ : 1;
  for (int i = 0; i < copies; ++i) e.copies.push_back(value.Clone());
  e.numel = value.numel();
  return Status::Ok();
}

Status LocalKVStore::Find(int key, const std::vector<Tensor>& tensors, const char* what,
                          Entry** entry) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return Status::InvalidArgument(std::string(what) + " of key " + std::to_string(key) + " before Init");
  }
  if (static_cast<int>(tensors.size()) != num_devices_) {
    return Status::InvalidArgument(std::string(what) + " of key " + std::to_string(key) + " with " +
                                   std::to_string(tensors.size()) + " values for " +
                                   std::to_string(num_devices_) + " devices");
  }
  for (const Tensor& t : tensors) {
    if (t.numel() != it->second.numel) {
      return Status::InvalidArgument(std::string(what) + " of key " + std::to_string(key) + ": " +
                                     t.ToString() + " does not match its " + std::to_string(it->second.numel) +
                                     " values");
    }
  }
  *entry = &it->second;
  return Status::Ok();
}

Status LocalKVStore::SetGradientCompression(const CompressionConfig& config) {
  if (config.enabled() && type_ != KVStoreType::kDevice) {
    return Status::InvalidArgument("gradient compression needs the device kvstore or a dist_* one, not " + name());
  }
  if (pushed_) return Status::InvalidArgument("gradient compression must be set before the first push");
  gc_ = config;
  return Status::Ok();
}

Status LocalKVStore::Push(int key, const std::vector<Tensor>& vals, int /*priority*/) {
  Entry* e = nullptr;
  TALLY_RETURN_IF_ERROR(Find(key, vals, "push", &e));
  const int64_t step = e->pushes++;
  // A step skipped without a WaitAll after it: finish its rollback before a newer one starts.
  if (skipping_.step >= 0 && step > skipping_.step) RollBack();
  pushed_ = true;
  Tensor merged = gc_.enabled() ? CompressedReduce(gc_, vals, &e->residuals) : Tensor();
  if (!merged.defined()) merged = comm_->Reduce(key, vals);
  if (!AllFinite(merged)) {
    if (skipping_.step != step) {
      skipping_ = SkippedStep();
      skipping_.step = step;
      skipping_.key = key;
    }
    skipping_.key = std::min(skipping_.key, key);
    return Status::Ok();
  }
  if (skipping_.step == step) return Status::Ok();  // the step is skipped: no key takes it
  e->undo.resize(e->copies.size());
  for (size_t c = 0; c < e->copies.size(); ++c) {
    if (!e->undo[c].defined()) e->undo[c] = Tensor::Empty(e->copies[c].shape(), e->copies[c].dtype(), e->copies[c].device());
    e->undo[c].CopyFrom(e->copies[c]);
    if (updaters_.empty()) {
      e->copies[c].CopyFrom(merged);
    } else {
      const int64_t t0 = profile::NowUs();
      updaters_[c]->SaveState(key, e->copies[c]);
      updaters_[c]->set_wd(KeyWd(optimizer_, key));
      updaters_[c]->set_key_excluded(optimizer_.no_wd_keys.count(key) != 0);
      updaters_[c]->Update(key, merged, &e->copies[c]);
      times_.update_us += profile::NowUs() - t0;
    }
  }
  e->undo_step = step;
  return Status::Ok();
}

void LocalKVStore::RollBack() {
  for (auto& [key, e] : entries_) {
    if (e.undo_step != skipping_.step) continue;
    for (size_t c = 0; c < e.copies.size(); ++c) {
      std::swap(e.copies[c], e.undo[c]);
      if (!updaters_.empty()) updaters_[c]->RestoreState(key);
    }
    e.undo_step = -1;
    if (!e.outs.empty()) CopyOut(e, e.outs);
  }
  skipped_ = skipping_;
  has_skipped_ = true;
  skipping_ = SkippedStep();
}

Status LocalKVStore::WaitAll() {
  if (skipping_.step >= 0) RollBack();
  return Status::Ok();
}

bool LocalKVStore::TakeSkippedStep(SkippedStep* out) {
  if (!has_skipped_) return false;
  *out = skipped_;
  has_skipped_ = false;
  return true;
}

Status LocalKVStore::Pull(int key, const std::vector<Tensor>& outs, int /*priority*/) {
  Entry* e = nullptr;
  TALLY_RETURN_IF_ERROR(Find(key, outs, "pull", &e));
  const int64_t t0 = profile::NowUs();
  CopyOut(*e, outs);
  e->outs = outs;
  times_.pull_us += profile::NowUs() - t0;
  return Status::Ok();
}

void LocalKVStore::CopyOut(const Entry& e, const std::vector<Tensor>& outs) const {
  if (!update_on_devices_) {
    comm_->Broadcast(e.copies[0], outs);
    return;
  }
  for (size_t d = 0; d < outs.size(); ++d) {
    Tensor out = outs[d];
    out.CopyFrom(e.copies[d]);
  }
}

Status LocalKVStore::SetGradientScale(float scale) {
  if (scale == 1.0f) return Status::Ok();
  return Status::InvalidArgument("--kv-store " + name() + " does not take a loss scale (float16 "
                                 "training with dynamic loss scaling needs local or device)");
}

TrainerHooks::Times LocalKVStore::TakeTimes() {
  Times t = times_;
  times_ = Times();
  return t;
}

Status LocalKVStore::GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) {
  states->assign(keys.size(), Tensor());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end()) return Status::InvalidArgument("optimizer state of key " + std::to_string(keys[i]) + " before Init");
    // Every copy's updater saw the same gradients: copy 0 speaks for all.
    if (!updaters_.empty()) (*states)[i] = updaters_[0]->State(keys[i], it->second.copies[0]);
  }
  return Status::Ok();
}

Status LocalKVStore::SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) {
  if (keys.size() != states.size()) return Status::InvalidArgument("optimizer state: keys and states differ in number");
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end()) return Status::InvalidArgument("optimizer state of key " + std::to_string(keys[i]) + " before Init");
    for (size_t c = 0; c < updaters_.size(); ++c) {
      TALLY_RETURN_IF_ERROR(updaters_[c]->SetState(keys[i], it->second.copies[c], states[i]));
    }
  }
  return Status::Ok();
}

}  // namespace tally
