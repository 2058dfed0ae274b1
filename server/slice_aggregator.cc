// SliceAggregator: gathering and summing one slice's pushes (slice_aggregator.h).
#include "server/slice_aggregator.h"

#include <algorithm>
#include <utility>

#include "optim/reduce.h"

namespace tally {

bool SliceAggregator::Counted(bool async, int64_t step, int rank, int64_t applied) const {
  if (async) return seen_.size() > static_cast<size_t>(rank) && seen_[rank].Has(step);
  auto it = pending_.find(step);
  return step <= applied || (it != pending_.end() && it->second.grads[rank].defined());
}

float SliceAggregator::AddSync(int64_t step, int rank, Tensor grad, float scale) {
  Step& st = pending_[step];
  if (st.grads.empty()) st.grads.resize(num_workers_);
  if (st.count == 0) st.scale = scale;
  st.grads[rank] = std::move(grad);
  ++st.count;
  return st.scale;
}

bool SliceAggregator::TakeReady(int64_t applied, Step* out) {
  if (pending_.empty() || (members_ != nullptr && members_->hold)) return false;
  auto it = pending_.begin();
  const int expected = members_ != nullptr ? members_->Count(it->first, num_workers_) : num_workers_;
  if (it->first != applied + 1 || it->second.count < expected) return false;
  *out = std::move(it->second);
  pending_.erase(it);
  if (expected < num_workers_) {
    std::vector<Tensor> live;
    for (Tensor& g : out->grads) {
      if (g.defined()) live.push_back(std::move(g));
    }
    out->grads = std::move(live);
  }
  return true;
}

void SliceAggregator::NoteAsync(int64_t step, int rank) {
  if (seen_.size() <= static_cast<size_t>(rank)) seen_.resize(num_workers_);
  seen_[rank].Add(step);
}

Tensor SliceAggregator::Sum(const std::vector<Tensor>& grads, bool* finite) {
  if (grads.size() == 1 && grads[0].dtype() == DType::kF32) {
    if (finite != nullptr) *finite = AllFinite(grads[0]);
    return grads[0];
  }
  // A sum still on its way (a backup's copy, a pull's answer) is not overwritten.
  if (!buffer_.defined() || buffer_.storage().use_count() > 1) buffer_ = Tensor::Empty({length_}, DType::kF32);
  if (finite != nullptr) {
    *finite = SumInF32AllFinite(grads, &buffer_);
  } else {
    SumInF32(grads, &buffer_);
  }
  return buffer_;
}

void SliceAggregator::SumBecameValues(const Tensor& sum, const Tensor& old_values) {
  if (sum.storage() != buffer_.storage()) return;
  buffer_ = old_values.defined() && old_values.storage().use_count() == 1 ? old_values : Tensor();
}

}  // namespace tally
