// ElasticShards: which examples of an epoch each worker reads at each step when the live
// workers change inside the epoch (--elastic, docs/faults.md "A worker leaves"), so that
// every epoch still visits each of its examples exactly once, the leaver's unread share
// included.
//
//   ElasticShards shards(/*num_examples=*/60000, /*batch_size=*/64, /*live=*/{0, 1, 2, 3});
//   for (int64_t step = 0;; ++step) {
//     if (shards.NeedsChangesBefore(step)) ...;  // settle the step in flight first
//     for (const Change& c : changes_heard_of) shards.AddChange(c.from_step, c.live);
//     shards.Advance();                            // now at `step`
//     ShardBatch b = shards.BatchOf(rank);         // b.positions: into the epoch's order
//     ... shards.epoch(), shards.index(), shards.epoch_batches() for the epoch lines
//   }
//
// Positions are indices into the epoch's order of the examples (a loader maps them through
// its EpochPermutation, data/shard.h); ranks are worker ranks.
//
// The cut. An epoch starts with all of its positions cut over the live ranks in rank order,
// in contiguous parts whose sizes differ by at most one, each read batch_size at a time;
// every part gets the same number of batches (the largest part's), the shorter parts'
// last batches padded by repeating their first positions (pad: not a visit). That is a
// segment. A change (a MEMBERSHIP: from step `from_step` the live ranks are `live`) is
// applied at step T = from_step + lag, or at the end of the segment in progress if that
// comes first: the positions not yet read (the rest of every part, and what the leavers
// were given for steps from their from_step to T, which they never read) are sorted and
// cut over the new live ranks, a new segment of the same epoch. When a segment ends with
// nothing left, the next epoch starts. Everything is a function of the changes and the
// step, never of when a worker heard of a change, so every worker, and a replay of the
// run's membership.jsonl, computes the same batches.
//
// Why lag. A worker learns of a change asynchronously; what it can be sure of when it reads
// step S's batch is that it has the answers of step S - 2's pulls (the overlap of a step
// with the next forward pass). No server gives those before it has taken in every change
// from a step <= S - 2, and each answer names the last it took in (RESPONSE's
// membership_epoch, docs/wire.md): the worker waits for that MEMBERSHIP from the scheduler.
// At a segment's end the caller settles the step in flight first (NeedsChangesBefore), so
// it knows every change from a step before it.
//
// A joiner (a rank live in a change and not in the one before) reads from the step its change
// is applied on (changes_applied() counts it), not before, even where BatchOf gives it a
// part (a rank back before its leave was applied): that part goes to the others.
//
// Not thread-safe: one thread drives it.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace tally {

// A worker may read step S's batch knowing every change from a step <= S - kElasticDataLag.
constexpr int64_t kElasticDataLag = 2;

struct ShardBatch {
  std::vector<int64_t> positions;  // batch_size of them (none for a rank without a part)
  int pad = 0;                     // trailing positions that repeat earlier ones of the part
};

class ElasticShards {
 public:
  // REQUIRES: num_examples > 0, batch_size > 0, `live` non-empty, lag >= 1.
  ElasticShards(int64_t num_examples, int batch_size, std::vector<int> live, int64_t lag = kElasticDataLag);

  // A change from step `from_step` on: the live ranks are `live` (distinct, >= 0). Changes
  // come in the order the scheduler decided them, their from_step never decreasing, each
  // added before Advance reaches the step it is applied at (NeedsChangesBefore). Fails,
  // saying why, on a change out of order, an empty or repeated live list, or one added too
  // late (its step of application already passed).
  Status AddChange(int64_t from_step, std::vector<int> live);

  // Whether the next Advance, to `step`, ends a segment: the caller must then have added
  // every change with from_step < step (else those with from_step <= step - lag suffice).
  bool NeedsChangesBefore(int64_t step) const { return step >= segment_end_; }

  // Moves to the next step (the first call: step 0).
  void Advance();

  int64_t step() const { return step_; }
  int64_t epoch() const { return epoch_; }
  int64_t index() const { return step_ - epoch_start_; }  // the batch of the epoch
  // Batches of the current epoch as far as known now (a change may make it longer or
  // shorter): the Speedometer's and the progress bar's total.
  int64_t epoch_batches() const { return segment_end_ - epoch_start_; }
  const std::vector<int>& live() const { return live_; }
  int64_t changes_applied() const { return applied_; }  // the first that many added
  ShardBatch BatchOf(int rank) const;

 private:
  struct Change {
    int64_t from_step;
    std::vector<int> live;
  };
  struct Given {  // what a rank was given at one step (pads left out)
    int64_t step;
    std::vector<int64_t> positions;
  };
  void StartSegment(std::vector<int64_t> remaining, int64_t at);
  void ApplyDue(int64_t at);
  ShardBatch Batch(size_t part, int64_t b) const;
  const std::vector<Given>* History(int rank) const;

  const int64_t n_;
  const int batch_size_;
  const int64_t lag_;
  std::vector<int> live_;          // sorted
  std::vector<Change> pending_;    // added, not yet applied
  int64_t last_from_step_ = 0;
  int64_t applied_ = 0;
  int64_t settled_before_ = 0;  // every change from a step before it was due by now
  int64_t step_ = -1, epoch_ = -1, epoch_start_ = 0;
  // The segment in progress: `remaining_` cut into live_.size() parts at offsets_.
  std::vector<int64_t> remaining_;
  std::vector<int64_t> offsets_;
  int64_t segment_start_ = 0, segment_end_ = 0;
  // Per rank, what it was given in the epoch's last `lag` steps (a leaver's unread share).
  std::vector<std::pair<int, std::vector<Given>>> history_;
};

}  // namespace tally
