// One slice's pushes, gathered and summed: the plain step's aggregation, apart from
// the layer of replication, spares and rollback around the server core (server.h).
//
//   SliceAggregator agg(/*num_workers=*/2, /*length=*/n);
//   // Sync: each worker's push of a step, in any order; the step is ready once all are in.
//   agg.AddSync(/*step=*/0, /*rank=*/1, grad1, /*scale=*/1.f);
//   agg.AddSync(0, 0, grad0, 1.f);
//   SliceAggregator::Step st;
//   if (agg.TakeReady(/*applied=*/-1, &st)) update(agg.Sum(st.grads));  // rank 0 + rank 1
//   // Async: a push is applied when it comes; the aggregator only remembers it came.
//   if (!agg.Counted(/*async=*/true, step, rank, applied)) agg.NoteAsync(step, rank);
//
// Sums are fp32, taken in worker rank order whatever the arrival order (SumInF32), so the
// result is the same bits on every run. Sum reuses one buffer per slice unless a send still
// holds it (a pull answered with it, a step forwarded to a backup): that buffer is then
// left alone and a fresh one taken.
//
// Thread-safety: none; the server core (server_core.h) calls it from its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "base/tensor.h"
#include "server/worker_membership.h"

namespace tally {

// The steps of one worker's pushes that a slice has taken, under dist_async, where pushes
// apply as they arrive and nothing else remembers them: every step below `next`, and the
// steps in `ahead` (a worker's steps are 0, 1, 2, ..., but may arrive out of order).
struct StepsSeen {
  int64_t next = 0;
  std::set<int64_t> ahead;
  bool Has(int64_t step) const { return step < next || ahead.count(step) > 0; }
  void Add(int64_t step) {
    ahead.insert(step);
    while (!ahead.empty() && *ahead.begin() == next) {
      ahead.erase(ahead.begin());
      ++next;
    }
  }
};

class SliceAggregator {
 public:
  // A synchronous step's pushes.
  struct Step {
    std::vector<Tensor> grads;  // by worker rank; undefined until that worker's push is in
    int count = 0;
    float scale = 1.0f;         // the pushes' gradient scale (Meta.grad_scale)
  };

  SliceAggregator() = default;  // holds nothing until assigned one of the form below
  SliceAggregator(int num_workers, int64_t length, const WorkerMembership* members = nullptr)
      : num_workers_(num_workers), length_(length), members_(members) {}

  // Whether worker `rank`'s push of `step` is already counted: sync, a step up to `applied`
  // or one waiting with that worker's push in; async, one NoteAsync has seen.
  bool Counted(bool async, int64_t step, int rank, int64_t applied) const;

  // Sync: keeps worker `rank`'s push of `step`. Returns the step's gradient scale: the first
  // push's, which a later one with another scale does not change.
  // REQUIRES: !Counted(false, step, rank, applied).
  float AddSync(int64_t step, int rank, Tensor grad, float scale);
  // Sync: when the step after `applied` has every (live) worker's push, moves it to *out and
  // forgets it, and returns true; false otherwise. Elastic: out->grads holds the live
  // workers' pushes alone, in rank order.
  bool TakeReady(int64_t applied, Step* out);

  // Elastic (defined in worker_membership.cc): forgets worker `rank`'s pushes of steps >=
  // from_step (it left before them).
  void Drop(int rank, int64_t from_step);
  // Elastic: the last step t such that `rank`'s push of every step up to t is counted.
  int64_t CountedThrough(int rank, int64_t applied) const;

  // Async: worker `rank`'s push of `step` was taken (applied or not).
  void NoteAsync(int64_t step, int rank);

  // The fp32 sum of grads, in their order: one fp32 push is its own sum (no copy; it is the
  // server's own, TakeData saw to that); otherwise the sum is written into the slice's
  // buffer, fresh if a send still holds the old one. finite (may be null): whether every
  // element of the sum is finite, found while summing (AllFinite of a lone fp32 push).
  Tensor Sum(const std::vector<Tensor>& grads, bool* finite = nullptr);
  // Without an optimizer a sum becomes the values: when `sum` is this slice's buffer, the
  // next Sum writes into `old_values` instead (if nothing else holds them), not into it.
  void SumBecameValues(const Tensor& sum, const Tensor& old_values);

 private:
  int num_workers_ = 0;
  int64_t length_ = 0;
  const WorkerMembership* members_ = nullptr;  // null: every worker counts, always
  std::map<int64_t, Step> pending_;  // sync: steps not yet applied, by step
  std::vector<StepsSeen> seen_;      // async: by worker rank
  Tensor buffer_;                    // the fp32 sum of several or 16-bit pushes
};

}  // namespace tally
