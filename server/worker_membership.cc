// Elastic workers' part of aggregation (worker_membership.h): the membership in force at a
// step, and a leaver's pushes an aggregator forgets or reports (slice_aggregator.h).
#include <algorithm>
#include <cstdint>

#include "server/slice_aggregator.h"
#include "server/worker_membership.h"

namespace tally {

const WorkerMembership::Change* WorkerMembership::At(int64_t step) const {
  for (auto it = changes.rbegin(); it != changes.rend(); ++it) {
    if (it->from_step <= step) return &*it;
  }
  return nullptr;
}

bool WorkerMembership::Live(int rank, int64_t step) const {
  const Change* c = At(step);
  return c == nullptr || c->live[rank];
}

int WorkerMembership::Count(int64_t step, int n) const {
  const Change* c = At(step);
  return c == nullptr ? n : static_cast<int>(std::count(c->live.begin(), c->live.end(), true));
}

void SliceAggregator::Drop(int rank, int64_t from_step) {
  for (auto& [step, st] : pending_) {
    if (step < from_step || st.grads.empty() || !st.grads[rank].defined()) continue;
    st.grads[rank] = Tensor();
    --st.count;
  }
}

int64_t SliceAggregator::CountedThrough(int rank, int64_t applied) const {
  int64_t t = applied;
  for (auto it = pending_.find(t + 1); it != pending_.end() && it->first == t + 1; it = pending_.find(t + 1)) {
    if (it->second.grads.empty() || !it->second.grads[rank].defined()) break;
    ++t;
  }
  return t;
}

}  // namespace tally
