// MembershipView: the workers of an --elastic job as this worker hears of them (docs/faults.md,
// "A worker leaves", "A worker joins"). Only the training loop, the elastic data source and a
// joiner's start ask it, never a script that pushes and pulls, so it is kept off KVStore's
// MXNet calls (kvstore.h). Every store hands one out, KVStore::membership_view(), never null,
// so callers need not ask the store's type first:
//
//   MembershipView* view = kv->membership_view();
//   const int64_t first = view->first_step();    // > 0: this worker joined the running job
//   std::vector<MembershipView::Membership> changes;
//   TALLY_RETURN_IF_ERROR(view->HeardMembership(&changes));  // what the data's re-cut follows
//   const int n = view->summed_workers();        // the last pull's sum counted n workers
//   const int lead = MembershipView::LeadAt(changes, /*step=*/41, kv->num_workers());
//
// The distributed types answer from what the scheduler and the servers said (dist_kvstore.h).
// A store whose workers never come and go (local, device) answers with a FixedMembership:
// every worker live from step 0, no change ever heard. Owned by the store it belongs to.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/status.h"

namespace tally {

class KVStore;  // kvstore.h

class MembershipView {
 public:
  // From step from_step on (the run's count), the live workers are `live`; epoch counts the
  // job's changes (0: the job's start, every rank live).
  struct Membership {
    int64_t epoch = 0;
    int64_t from_step = 0;
    std::vector<int> live;
  };
  // Epoch 0: ranks 0 .. num_workers - 1 live from step 0, what every worker starts from.
  static Membership Everyone(int num_workers);
  // The lead at `step` (the run's count): the lowest rank live there, as `changes` (by
  // epoch) say; -1 when none is. The lead writes the checkpoints and tells a joiner its loss
  // scale, so that a job whose worker 0 left goes on saving (docs/faults.md, "The lead").
  static int LeadAt(const std::vector<Membership>& changes, int64_t step, int num_workers) {
    std::vector<int> live = Everyone(num_workers).live;
    for (const Membership& c : changes) {
      if (c.from_step <= step) live = c.live;
    }
    return live.empty() ? -1 : *std::min_element(live.begin(), live.end());
  }
  // The epoch of the change that made worker `rank` live from `step` on (a join); -1: none.
  static int64_t JoinEpoch(const std::vector<Membership>& changes, int rank, int64_t step, int num_workers) {
    std::vector<int> before = Everyone(num_workers).live;
    for (const Membership& c : changes) {
      const bool now = std::count(c.live.begin(), c.live.end(), rank) > 0;
      if (c.from_step == step && now && std::count(before.begin(), before.end(), rank) == 0) return c.epoch;
      before = c.live;
    }
    return -1;
  }
  // Who tells the worker that joins in change `epoch` its loss scale (LOSS_SCALE): the
  // lowest rank live both before that change and after it, which settles the step before the
  // join and goes on (a rank 0 that joins takes the lead from its step, but is told by the
  // lead before it). -1: no such change, or nobody live on both sides.
  static int JoinTeller(const std::vector<Membership>& changes, int64_t epoch, int num_workers) {
    std::vector<int> before = Everyone(num_workers).live;
    for (const Membership& c : changes) {
      if (c.epoch == epoch) {
        int teller = -1;
        for (int r : c.live) {
          if (std::find(before.begin(), before.end(), r) != before.end() && (teller < 0 || r < teller)) teller = r;
        }
        return teller;
      }
      before = c.live;
    }
    return -1;
  }

  virtual ~MembershipView() = default;

  // The live workers as this worker last heard from the scheduler (its MEMBERSHIP), or
  // Everyone before any change.
  virtual Membership membership() const = 0;
  // Every change heard of, by epoch, waiting first for each one a server's answer so far
  // was decided under (the changes a re-cut of the data needs, data/elastic_shard.h).
  virtual Status HeardMembership(std::vector<Membership>* out) = 0;
  // The workers whose pushes the last answered pull summed (the live ones of that step, which
  // the servers say with the values; KVStore::num_workers() when nobody said): what a mean
  // over the job's workers divides by.
  virtual int summed_workers() const = 0;
  // The job's step of this worker's first push: 0, or, for a worker that joined a running
  // --elastic job (TALLY_JOIN=1), its join's from_step; Init gave it the job's weights after
  // the step before (dist_kvstore.h).
  virtual int64_t first_step() const = 0;
};

// The view of a store without workers that come and go: KVStore::membership_view()'s default.
// It asks the store for num_workers() on each call rather than copying it, so it stays right
// whatever the store's type answers.
class FixedMembership final : public MembershipView {
 public:
  explicit FixedMembership(const KVStore* kv) : kv_(kv) {}
  Membership membership() const override;
  Status HeardMembership(std::vector<Membership>* out) override {
    out->clear();
    return Status::Ok();
  }
  int summed_workers() const override;
  int64_t first_step() const override { return 0; }

 private:
  const KVStore* const kv_;
};

}  // namespace tally
