#include "optim/updater.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "base/parallel.h"
#include "ops/sgd_rule.h"
#include "optim/rules.h"

namespace tally {
namespace {

// to = a copy of from (both undefined when from is).
void CopyInto(const Tensor& from, Tensor* to) {
  if (!from.defined()) {
    *to = Tensor();
    return;
  }
  if (!to->defined() || to->numel() != from.numel() || to->dtype() != from.dtype()) {
    *to = Tensor::Empty(from.shape(), from.dtype(), from.device());
  }
  if (from.device().is_cpu()) {
    ParallelCopy(to->raw_data(), from.raw_data(), from.nbytes());  // a server's undo copy, each step
  } else {
    to->CopyFrom(from);
  }
}

// The largest step count an fp32 slot holds exactly.
constexpr float kMaxCount = 16777216.0f;

std::string SlotName(int key, int slot) {
  return "optimizer state of key " + std::to_string(key) + ", slot " + std::to_string(slot);
}

}  // namespace

Updater::Updater(const OptimizerConfig& config) : config_(WithDefaults(config)) {
  const StateLayout l = LayoutOf(config_);
  arrays_ = l.arrays;
  slots_ = OptimizerStateSlots(config_);
  int next = arrays_;
  if (l.count) count_slot_ = next++;
  if (l.last_lr) last_lr_slot_ = next++;
}

Updater::KeyState& Updater::StateFor(int key, const Tensor& weight) {
  auto it = states_.find(key);
  if (it != states_.end()) return it->second;
  KeyState& s = states_[key];
  for (int i = 0; i < arrays_; ++i) s.arrays.push_back(Tensor::Zeros({weight.numel()}, DType::kF32, weight.device()));
  if (weight.dtype() != DType::kF32) s.master = weight.To(DType::kF32).Reshape({weight.numel()});
  return s;
}

Tensor Updater::SlotOf(const std::vector<Tensor>& arrays, const Scalars& scalars, int slot, int64_t n) const {
  CHECK(slot >= 0 && slot < slots_) << "state slot " << slot << " of " << slots_;
  if (slot < arrays_) return arrays[static_cast<size_t>(slot)].Clone();
  Tensor t = Tensor::Empty({n}, DType::kF32);
  t.Fill(slot == count_slot_ ? static_cast<float>(scalars.count) : scalars.last_lr);
  return t;
}

Tensor Updater::StateSlot(int key, const Tensor& weight, int slot) {
  const KeyState& s = StateFor(key, weight);
  return SlotOf(s.arrays, s.scalars, slot, weight.numel());
}

Status Updater::CheckStateSlot(int key, int64_t n, int slot, const Tensor& value) const {
  if (slot < 0 || slot >= slots_) {
    return Status::InvalidArgument(SlotName(key, slot) + ": --optimizer " + config_.type + " keeps " +
                                   std::to_string(slots_) + " slots");
  }
  if (!value.defined() || value.numel() != n) {
    return Status::InvalidArgument(SlotName(key, slot) + ": " + (value.defined() ? value.ToString() : std::string("none")) +
                                   " for a weight of " + std::to_string(n) + " values");
  }
  if (slot < arrays_) return Status::Ok();
  // A scalar slot: every element the same, a count an exact non-negative integer.
  const Tensor v = value.dtype() == DType::kF32 ? value : value.To(DType::kF32);
  const float* p = v.data<float>();
  const float x = p[0];
  for (int64_t i = 1; i < n; ++i) {
    if (std::memcmp(&p[i], &x, sizeof(float)) != 0) {
      return Status::InvalidArgument(SlotName(key, slot) + ": element " + std::to_string(i) + " differs from element 0");
    }
  }
  if (slot == count_slot_ && !(x >= 0 && x <= kMaxCount && x == std::floor(x))) {
    return Status::InvalidArgument(SlotName(key, slot) + ": the step count " + std::to_string(x) + " is not a count");
  }
  if (slot == last_lr_slot_ && (!(x >= 0) || std::isinf(x))) {
    return Status::InvalidArgument(SlotName(key, slot) + ": the previous lr " + std::to_string(x) + " is not >= 0");
  }
  return Status::Ok();
}

Status Updater::SetStateSlot(int key, const Tensor& weight, int slot, const Tensor& value) {
  TALLY_RETURN_IF_ERROR(CheckStateSlot(key, weight.numel(), slot, value));
  KeyState& s = StateFor(key, weight);
  const Tensor v = value.dtype() == DType::kF32 ? value : value.To(DType::kF32);
  if (slot < arrays_) {
    s.arrays[static_cast<size_t>(slot)].CopyFrom(v.Reshape({weight.numel()}));
  } else if (slot == count_slot_) {
    s.scalars.count = static_cast<int64_t>(v.data<float>()[0]);
  } else {
    s.scalars.last_lr = v.data<float>()[0];
  }
  return Status::Ok();
}

Tensor Updater::State(int key, const Tensor& weight) {
  if (slots_ == 0) return Tensor();
  const int64_t n = weight.numel();
  Tensor all = Tensor::Empty({slots_ * n}, DType::kF32);
  for (int i = 0; i < slots_; ++i) all.Slice(i * n, (i + 1) * n).CopyFrom(StateSlot(key, weight, i));
  return all;
}

Status Updater::SetState(int key, const Tensor& weight, const Tensor& state) {
  const int64_t n = weight.numel();
  if (slots_ == 0) {
    if (state.defined() && state.numel() > 0) {
      return Status::InvalidArgument("optimizer state of key " + std::to_string(key) + " given, but --optimizer " +
                                     config_.type + " keeps none here" + (config_.momentum == 0 ? " (--mom is 0)" : ""));
    }
    return Status::Ok();
  }
  if (!state.defined() || state.numel() != slots_ * n) {
    return Status::InvalidArgument("optimizer state of key " + std::to_string(key) + ": " +
                                   (state.defined() ? state.ToString() : std::string("none")) + ", but --optimizer " +
                                   config_.type + " keeps " + std::to_string(slots_) + " x " + std::to_string(n) +
                                   " values");
  }
  const Tensor flat = state.Reshape({slots_ * n});
  for (int i = 0; i < slots_; ++i) TALLY_RETURN_IF_ERROR(SetStateSlot(key, weight, i, flat.Slice(i * n, (i + 1) * n)));
  return Status::Ok();
}

void Updater::SaveState(int key, const Tensor& weight) {
  KeyState& s = StateFor(key, weight);
  s.saved_arrays.resize(s.arrays.size());
  for (size_t i = 0; i < s.arrays.size(); ++i) CopyInto(s.arrays[i], &s.saved_arrays[i]);
  CopyInto(s.master, &s.saved_master);
  s.saved_scalars = s.scalars;
  s.saved = true;
}

void Updater::UpdateKeepingUndo(int key, const Tensor& grad, const Tensor& before, Tensor* weight) {
  CHECK(before.numel() == weight->numel() && before.dtype() == weight->dtype() && before.device() == weight->device())
      << "update of key " << key << " from " << before.ToString() << " into " << weight->ToString();
  const Rule rule = RuleOf(config_.type);
  const bool swap = (rule == Rule::kSgd || rule == Rule::kNag) && weight->dtype() == DType::kF32 &&
                    weight->device().is_cpu() && grad.dtype() == DType::kF32 && grad.numel() == weight->numel();
  if (!swap) {
    if (before.raw_data() != weight->raw_data()) ParallelCopy(weight->raw_data(), before.raw_data(), weight->nbytes());
    SaveState(key, *weight);
    Update(key, grad, weight);
    return;
  }
  KeyState& s = StateFor(key, *weight);
  const int64_t n = weight->numel();
  std::swap(s.arrays, s.saved_arrays);  // the state as it is becomes the undo copy
  s.arrays.resize(s.saved_arrays.size());
  for (size_t i = 0; i < s.arrays.size(); ++i) {
    if (!s.arrays[i].defined() || s.arrays[i].numel() != n) s.arrays[i] = Tensor::Empty({n}, DType::kF32);
  }
  s.saved_master = Tensor();  // fp32 weights have no master
  s.saved_scalars = s.scalars;
  s.saved = true;
  const SgdParams p = ToSgdParams(config_, gradient_scale_);
  const float* g = grad.data<float>();
  const float* w_in = before.data<float>();
  float* w_out = weight->data<float>();
  const float* m_in = s.arrays.empty() ? nullptr : s.saved_arrays[0].data<float>();
  float* m_out = s.arrays.empty() ? nullptr : s.arrays[0].data<float>();
  // The in-place op's arithmetic (SgdUpdateOne), reading one buffer and writing the other.
  ForPieces(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float w = w_in[i], m = m_in != nullptr ? m_in[i] : 0.0f;
      SgdUpdateOne(p, g[i], &w, m_out != nullptr ? &m : nullptr);
      w_out[i] = w;
      if (m_out != nullptr) m_out[i] = m;
    }
  });
}

bool Updater::RestoreState(int key) {
  auto it = states_.find(key);
  if (it == states_.end() || !it->second.saved) return false;
  KeyState& s = it->second;
  // The live state is overwritten by the next SaveState: swapping spares a copy.
  std::swap(s.arrays, s.saved_arrays);
  std::swap(s.master, s.saved_master);
  s.scalars = s.saved_scalars;
  s.saved = false;
  return true;
}

Tensor Updater::SavedStateSlot(int key, int slot) const {
  auto it = states_.find(key);
  if (it == states_.end() || !it->second.saved || slot < 0 || slot >= slots_) return Tensor();
  const KeyState& s = it->second;
  const int64_t n = s.saved_arrays.empty() ? (s.arrays.empty() ? -1 : s.arrays[0].numel()) : s.saved_arrays[0].numel();
  if (slot < arrays_) return s.saved_arrays[static_cast<size_t>(slot)].Clone();
  CHECK(n >= 0) << "a scalar slot of a rule without arrays";
  return SlotOf(s.saved_arrays, s.saved_scalars, slot, n);
}

void Updater::UpdateSgd(KeyState* s, const Tensor& grad, Tensor* weight) {
  const SgdParams p = ToSgdParams(config_, gradient_scale_);
  Tensor* mom = s->arrays.empty() ? nullptr : &s->arrays[0];
  if (weight->dtype() == DType::kF32) {
    const int64_t n = weight->numel();
    const Tensor g = (grad.dtype() == DType::kF32 ? grad : grad.To(DType::kF32)).Reshape({n});
    const Tensor w = weight->Reshape({n}), m = mom != nullptr ? mom->Reshape({n}) : Tensor();
    ForPieces(n, [&](int64_t begin, int64_t end) {
      Tensor w_piece = w.Slice(begin, end), m_piece = m.defined() ? m.Slice(begin, end) : Tensor();
      SgdUpdate(p, g.Slice(begin, end), &w_piece, m.defined() ? &m_piece : nullptr);
    });
    return;
  }
  if (config_.multi_precision) {
    const Tensor g = grad.dtype() == weight->dtype() ? grad : grad.To(weight->dtype());
    SgdMultiPrecisionUpdate(p, g, weight, &s->master, mom);
    return;
  }
  // A 16-bit weight without a master copy: update in fp32 and round back every step.
  Tensor w32 = weight->To(DType::kF32);
  SgdUpdate(p, grad.To(DType::kF32), &w32, mom);
  weight->CopyFrom(w32);
}

// The other rules run on fp32 on the CPU: the weight itself, its master (multi_precision),
// or a copy rounded back after the step. MXNet's multi-precision wrapper does the same: the
// rule on the fp32 master with the gradient cast to fp32, then the cast back.
void Updater::UpdateRule(KeyState* s, const Tensor& grad, Tensor* weight) {
  CHECK(weight->device().is_cpu() && grad.device().is_cpu()) << "--optimizer " << config_.type << " runs on the CPU";
  const int64_t n = weight->numel();
  const Tensor g32 = grad.dtype() == DType::kF32 ? grad : grad.To(DType::kF32);
  const bool f32 = weight->dtype() == DType::kF32;
  Tensor w32 = f32 ? *weight : (config_.multi_precision ? s->master : weight->To(DType::kF32));
  RuleStep step;
  step.lr = config_.lr;
  step.rescale_grad = config_.rescale_grad / gradient_scale_;
  step.t = s->scalars.count + 1;
  step.last_lr = s->scalars.last_lr;
  const Rule rule = RuleOf(config_.type);
  if (rule == Rule::kAdam) {  // Adam.update: the bias correction goes into the lr, in double
    const double coef1 = 1. - std::pow(static_cast<double>(config_.beta1), static_cast<double>(step.t));
    const double coef2 = 1. - std::pow(static_cast<double>(config_.beta2), static_cast<double>(step.t));
    step.lr = static_cast<float>(config_.lr * std::sqrt(coef2) / coef1);
  }
  step.trust_ratio = !key_excluded_;
  if (rule == Rule::kLars && step.trust_ratio) {  // the norm of the weight as stored: fp16 under multi-precision
    const Tensor stored = f32 ? *weight : weight->To(DType::kF32);
    step.weight_norm = std::sqrt(SumSquares(stored.data<float>(), n));
  }
  RuleArrays a;
  a.w = w32.data<float>();
  a.g = g32.data<float>();
  for (int i = 0; i < arrays_; ++i) a.s[i] = s->arrays[static_cast<size_t>(i)].data<float>();
  a.n = n;
  if (rule == Rule::kLamb && static_cast<int64_t>(scratch_.size()) < n) scratch_.resize(static_cast<size_t>(n));
  if (rule == Rule::kLars || rule == Rule::kLamb) {  // their norms span the whole weight
    ApplyRule(config_, step, a, scratch_.data());
  } else {
    ForPieces(n, [&](int64_t begin, int64_t end) {
      RuleArrays piece = a;
      piece.w += begin;
      piece.g += begin;
      for (int i = 0; i < arrays_; ++i) piece.s[i] += begin;
      piece.n = end - begin;
      ApplyRule(config_, step, piece, nullptr);
    });
  }
  s->scalars.count = step.t;
  s->scalars.last_lr = config_.lr;
  if (!f32) weight->CopyFrom(w32.Reshape(weight->shape()));
}

void Updater::ForPieces(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const {
  // Tens of microseconds of work a piece at least (the ops' own serial size): waking a
  // pool thread costs a few.
  constexpr int64_t kElementsPerPiece = int64_t{32} << 10;
  const int64_t pieces = spread_ ? std::min<int64_t>(n / kElementsPerPiece, ParallelForThreads()) : 1;
  if (pieces <= 1) return fn(0, n);
  ParallelFor(static_cast<size_t>(pieces), [&](size_t i) {
    const int64_t k = static_cast<int64_t>(i);
    fn(n * k / pieces, n * (k + 1) / pieces);
  });
}

void Updater::Update(int key, const Tensor& grad, Tensor* weight) {
  CHECK_EQ(grad.numel(), weight->numel()) << "update of key " << key;
  KeyState& s = StateFor(key, *weight);
  const Rule rule = RuleOf(config_.type);
  if (rule == Rule::kSgd || rule == Rule::kNag) {
    UpdateSgd(&s, grad, weight);
  } else {
    UpdateRule(&s, grad, weight);
  }
}

}  // namespace tally
