// StepRates: a server's learning rate by step (step_rates.h).
#include "server/step_rates.h"

#include <algorithm>
#include <iterator>

namespace tally {

void StepRates::SetFrom(int64_t step, float lr, int64_t next_update) {
  from_step_[step] = lr;
  auto it = from_step_.upper_bound(std::min(step, next_update));
  if (it != from_step_.begin()) {
    base_ = std::prev(it)->second;
    from_step_.erase(from_step_.begin(), it);
  }
}

float StepRates::For(int64_t step) const {
  auto it = from_step_.upper_bound(step);
  return it == from_step_.begin() ? base_ : std::prev(it)->second;
}

}  // namespace tally
