#include "optim/updater.h"

#include <utility>

namespace tally {

Updater::Updater(const OptimizerConfig& config) : config_(config) {}

Updater::State& Updater::StateFor(int key, const Tensor& weight) {
  auto it = states_.find(key);
  if (it != states_.end()) return it->second;
  State& s = states_[key];
  if (config_.momentum > 0) s.mom = Tensor::Zeros(weight.shape(), DType::kF32, weight.device());
  if (weight.dtype() != DType::kF32) s.master = weight.To(DType::kF32);
  return s;
}

Tensor Updater::Momentum(int key, const Tensor& weight) {
  const State& s = StateFor(key, weight);
  return s.mom.defined() ? s.mom.Clone() : Tensor();
}

Status Updater::SetMomentum(int key, const Tensor& weight, const Tensor& mom) {
  State& s = StateFor(key, weight);
  if (!s.mom.defined()) {
    if (mom.defined()) return Status::InvalidArgument("optimizer state of key " + std::to_string(key) + " given, but --mom is 0");
    return Status::Ok();
  }
  if (!mom.defined() || mom.numel() != s.mom.numel()) {
    return Status::InvalidArgument("optimizer state of key " + std::to_string(key) + ": " +
                                   (mom.defined() ? mom.ToString() : std::string("none")) + " for " + s.mom.ToString());
  }
  s.mom.CopyFrom(mom.Reshape(s.mom.shape()));
  return Status::Ok();
}

namespace {

// to = a copy of from (both undefined when from is).
void CopyInto(const Tensor& from, Tensor* to) {
  if (!from.defined()) {
    *to = Tensor();
    return;
  }
  if (!to->defined() || to->numel() != from.numel()) *to = Tensor::Empty(from.shape(), from.dtype(), from.device());
  to->CopyFrom(from);
}

}  // namespace

void Updater::SaveState(int key, const Tensor& weight) {
  State& s = StateFor(key, weight);
  CopyInto(s.mom, &s.saved_mom);
  CopyInto(s.master, &s.saved_master);
  s.saved = true;
}

bool Updater::RestoreState(int key) {
  auto it = states_.find(key);
  if (it == states_.end() || !it->second.saved) return false;
  State& s = it->second;
  // The live state is overwritten by the next SaveState: swapping spares a copy.
  std::swap(s.mom, s.saved_mom);
  std::swap(s.master, s.saved_master);
  s.saved = false;
  return true;
}

Tensor Updater::SavedMomentum(int key) const {
  auto it = states_.find(key);
  if (it == states_.end() || !it->second.saved || !it->second.saved_mom.defined()) return Tensor();
  return it->second.saved_mom.Clone();
}

void Updater::Update(int key, const Tensor& grad, Tensor* weight) {
  CHECK_EQ(grad.numel(), weight->numel()) << "update of key " << key;
  const SgdParams p = ToSgdParams(config_, gradient_scale_);

  State& s = StateFor(key, *weight);
  Tensor* mom = s.mom.defined() ? &s.mom : nullptr;
  if (weight->dtype() == DType::kF32) {
    SgdUpdate(p, grad.dtype() == DType::kF32 ? grad : grad.To(DType::kF32), weight, mom);
    return;
  }
  if (config_.multi_precision) {
    const Tensor g = grad.dtype() == weight->dtype() ? grad : grad.To(weight->dtype());
    SgdMultiPrecisionUpdate(p, g, weight, &s.master, mom);
    return;
  }
  // A 16-bit weight without a master copy: update in fp32 and round back every step.
  Tensor w32 = weight->To(DType::kF32);
  SgdUpdate(p, grad.To(DType::kF32), &w32, mom);
  weight->CopyFrom(w32);
}

}  // namespace tally
