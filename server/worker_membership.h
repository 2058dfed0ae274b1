// WorkerMembership: which workers a synchronous step waits for when workers may leave or
// join (--elastic, docs/faults.md), apart from the plain aggregation (slice_aggregator.h),
// which asks it only when a layer gives it one (KVServer::SetElastic).
//
//   WorkerMembership members;
//   members.changes.push_back({/*from_step=*/30, {true, true, false}});  // worker 2 left
//   members.Count(29, 3);   // 3
//   members.Count(30, 3);   // 2
//   members.Live(2, 31);    // false
//
// Thread-safety: none; the server's one thread uses it.
#pragma once

#include <cstdint>
#include <vector>

namespace tally {

// Elastic workers (--elastic, docs/faults.md): which workers' pushes a step counts. Each
// change is (from_step, live ranks); a step counts the workers live at its step. While a
// change is being decided (`hold`), no step is applied: the step it starts from is not known
// yet, and a step applied meanwhile could count a leaver's push here and not elsewhere.
struct WorkerMembership {
  struct Change {
    int64_t from_step = 0;
    std::vector<bool> live;  // by rank
  };
  std::vector<Change> changes;  // by from_step, ascending
  bool hold = false;
  // The ranks live at `step`, of n workers at the start.
  bool Live(int rank, int64_t step) const;
  int Count(int64_t step, int n) const;
  // The change in force at `step` (the last one from it or before); null: none yet.
  const Change* At(int64_t step) const;
};

}  // namespace tally
