// The learning rate of each step's update on a server: SET_OPTIMIZER's, then SET_LR's from
// the step each names (docs/wire.md, "Data commands"); the plain step's (server_core.h).
//
//   StepRates lr;
//   lr.Reset(0.1f);                          // SET_OPTIMIZER; dist_async's SET_LR too
//   lr.SetFrom(/*step=*/10, 0.01f, /*next_update=*/3);  // sync SET_LR of step 10
//   lr.For(9);   // 0.1
//   lr.For(12);  // 0.01
//
// Sync: a worker's SET_LR of step t may come while earlier steps still wait for pushes,
// so the rates are kept by first step; what no update to come can use (steps before the
// earliest next update of any slice) is folded into the base rate, so the schedule stays
// as short as the steps in flight.
//
// Thread-safety: none; the server core (server_core.h) calls it from its one thread.
#pragma once

#include <cstdint>
#include <map>

namespace tally {

class StepRates {
 public:
  // Every step from now on: `lr`.
  void Reset(float lr) {
    base_ = lr;
    from_step_.clear();
  }
  // Steps >= `step`: `lr`. next_update: the earliest step any slice will apply next.
  void SetFrom(int64_t step, float lr, int64_t next_update);
  // The learning rate of `step`'s update.
  float For(int64_t step) const;

 private:
  float base_ = 0;
  std::map<int64_t, float> from_step_;  // learning rates by first step, after base_
};

}  // namespace tally
