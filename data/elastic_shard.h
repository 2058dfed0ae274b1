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
// part (a rank back before its leave was applied): that part goes to the others. Until then
// it reads NoPartBatch(), a batch of pads (the segment's first positions, not a visit), so
// that it still pushes a gradient at every step the servers count it in.
//
// A resumed run (a checkpoint inside an epoch) starts at its epoch's first step (StartAt),
// adds the changes recorded from that step on and then, unless they are the live workers
// with nothing pending, the workers it gathered as a change applied at once
// (AddChangeAtOnce: nobody read anything from the resume step on), and advances to the
// resume step: the rest of the epoch is cut over the gathered workers
// (data/elastic_reader.h does this).
//
// Not thread-safe: one thread drives it.
#pragma once

#include <cstdint>
#include <memory>
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

  // The same, applied at from_step itself instead of from_step + lag: the workers a resumed
  // run gathered, at its first step (nobody has read a batch from from_step on). Fails as
  // AddChange does, and when from_step is not after the current step.
  Status AddChangeAtOnce(int64_t from_step, std::vector<int> live);

  // Before the first Advance: that Advance starts epoch `epoch` at step `step` (a resumed run
  // or a joiner starts at its epoch's first step) instead of epoch 0 at step 0. Changes from
  // a step before `step` are not taken: the epoch's cut starts over the constructor's `live`.
  void StartAt(int64_t epoch, int64_t step);

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
  // A batch of pads for a rank without a part (a joiner before its change is applied): the
  // segment's first positions, pad == batch_size.
  ShardBatch NoPartBatch() const;
  // Positions of the current epoch given out before the current step (pads left out): the
  // epoch's progress, for a learning-rate schedule. A re-cut may take it back by the
  // leavers' unread share (at most lag batches each).
  int64_t given() const;

  // The batches of a segment of r positions over k ranks (an epoch's first: r = num_examples).
  static int64_t Batches(int64_t r, int64_t k, int batch_size);

  // The batches rank `rank` reads from the current step on if no change is applied (a
  // loader decodes them ahead): immutable, safe to share between threads.
  class Forecast {
   public:
    // The batch of step `step` (>= the step it was made at), and its epoch and batch index.
    ShardBatch At(int64_t step, int64_t* epoch, int64_t* index) const;

   private:
    friend class ElasticShards;
    int64_t n_ = 0, k_ = 0;
    int batch_size_ = 0;
    int part_ = -1;  // -1: no part
    std::shared_ptr<const std::vector<int64_t>> remaining_;
    std::vector<int64_t> offsets_;
    int64_t segment_start_ = 0, segment_end_ = 0, epoch_ = 0, epoch_start_ = 0;
  };
  std::shared_ptr<const Forecast> ForecastOf(int rank) const;

 private:
  struct Change {
    int64_t from_step;
    std::vector<int> live;
    bool at_once;
  };
  Status Add(int64_t from_step, std::vector<int> live, bool at_once);
  bool Due(const Change& c, int64_t at) const;
  struct Given {  // what a rank was given at one step (pads left out)
    int64_t step;
    std::vector<int64_t> positions;
  };
  void StartSegment(std::vector<int64_t> remaining, int64_t at);
  void ApplyDue(int64_t at);
  ShardBatch Batch(size_t part, int64_t b) const {
    return CutBatch(remaining_->data(), static_cast<int64_t>(remaining_->size()), offsets_, part, b, batch_size_);
  }
  // Batch b of `part` of r positions cut at `offsets` (remaining: nullptr for 0..r-1).
  static ShardBatch CutBatch(const int64_t* remaining, int64_t r, const std::vector<int64_t>& offsets, size_t part,
                             int64_t b, int batch_size);
  static std::vector<int64_t> Offsets(int64_t r, int64_t k);
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
  std::shared_ptr<const std::vector<int64_t>> remaining_;  // shared with Forecasts
  std::vector<int64_t> offsets_;
  int64_t segment_start_ = 0, segment_end_ = 0;
  // Per rank, what it was given in the epoch's last `lag` steps (a leaver's unread share).
  std::vector<std::pair<int, std::vector<Given>>> history_;
};

}  // namespace tally
