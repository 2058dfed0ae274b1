// ElasticReader: one worker's use of ElasticShards (data/elastic_shard.h) under `tally train
// --elastic`: at each of the job's steps, the epoch, the batch of the epoch and the positions
// (into the epoch's order of the examples) this worker reads, from the membership changes
// its kvstore heard; and what a checkpoint records so that a resumed run reads the rest of
// the epoch exactly once (ElasticRecord).
//
//   ElasticReader::Options o;
//   o.num_examples = 60000;  o.batch_size = 64;  o.rank = 2;
//   o.heard = [&](std::vector<MembershipChange>* out) { ... MembershipView::HeardMembership ... };
//   ElasticReader reader(o);
//   TALLY_RETURN_IF_ERROR(reader.Start(ElasticStart{...}));  // fresh: every rank, step 0
//   for (int64_t step = start;; ++step) {
//     ElasticStep at;
//     TALLY_RETURN_IF_ERROR(reader.Place(step, settle, &at));  // settle: the step in flight
//     ... read at.batch.positions (at.batch.pad of them repeats, not visits) ...
//   }
//   ElasticRecord record;                                       // into a checkpoint
//   TALLY_RETURN_IF_ERROR(reader.Record(step, &record));  ... record.ToJson() ...
//
// Driven by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/elastic_shard.h"

namespace tally {

// From step `from_step` on, the live workers are `live` (MembershipView::Membership's).
struct MembershipChange {
  int64_t from_step = 0;
  std::vector<int> live;
  bool at_once = false;  // a resumed run's gathered workers (ElasticShards::AddChangeAtOnce)
};

// What a checkpoint taken at step `step` records of the data position: the examples of an
// epoch, the live workers when the checkpoint's epoch started, and the changes from then on
// that the epoch's cut depends on (from a step before the checkpoint's).
struct ElasticRecord {
  int64_t num_examples = 0;
  std::vector<int> epoch_live;
  std::vector<MembershipChange> changes;
  std::string ToJson() const;
  // Fails naming `what` (the file) for malformed JSON or values out of range.
  static Status FromJson(const std::string& what, const std::string& json, ElasticRecord* out);
};

// Where a worker process starts.
struct ElasticStart {
  int64_t epoch = 0, batch = 0, step = 0;  // the checkpoint's (0, 0, 0: a fresh run)
  ElasticRecord record;                     // its record; epoch_live empty: every gathered rank
  std::vector<int> gathered;                // the ranks of this job at its first step
};

struct ElasticStep {
  int64_t epoch = 0, index = 0;  // the batch of the epoch
  int64_t epoch_batches = 0;     // the epoch's batches as far as known now
  int64_t given = 0;             // positions of the epoch given out before this step, never less than before
  bool reads = false;            // false: a joiner before its change applies; `batch` is pads
  ShardBatch batch;
};

class ElasticReader {
 public:
  struct Options {
    int64_t num_examples = 0;
    int batch_size = 0;
    int rank = 0;
    // Every membership change of this run of the job, in order
    // (MembershipView::HeardMembership), from_step counted from the run's first step (a
    // resumed run's servers count from 0): the reader adds the start's step.
    std::function<Status(std::vector<MembershipChange>*)> heard;
  };
  explicit ElasticReader(Options options) : o_(std::move(options)) {}

  // Sets up the cut of start.epoch from its first step, with the recorded changes and, for a
  // resumed run (step > 0), the gathered ranks as a change at start.step; the next Place is
  // of start.step. Fails naming the checkpoint's values when they do not fit.
  Status Start(const ElasticStart& start);

  // Moves to the job's step `step` (one after the last). When the step ends a segment, calls
  // settle() first (the step in flight must be settled for every change before `step` to be
  // heard). Fails on a change heard out of order or too late, or on heard()'s failure.
  // A first Place after the start's step is a joiner's first step: the cut is followed up to
  // it through the changes heard, its own join among them, and it reads once its join applies.
  Status Place(int64_t step, const std::function<Status()>& settle, ElasticStep* out);

  // The record of a checkpoint taken at step `step` (the last Place's step, or the one after),
  // with the step in flight settled: every change from a step before it is heard first.
  Status Record(int64_t step, ElasticRecord* out);
  // Where the last Place left the shards: the next epoch is known only at a Place.
  const ElasticShards* shards() const { return shards_.get(); }
  int64_t num_examples() const { return o_.num_examples; }

 private:
  Status Hear();
  Status PlaceOne(int64_t step, const std::function<Status()>& settle, ElasticStep* out);
  Status Add(const MembershipChange& c);

  const Options o_;
  std::unique_ptr<ElasticShards> shards_;
  std::vector<MembershipChange> added_;  // every change added to shards_, in order
  size_t heard_ = 0;                     // of heard()'s list, how many were taken
  int64_t first_step_ = 0;               // this process's first step
  int64_t run_start_ = 0;                // the run's first step (a resumed run's checkpoint step)
  bool placed_ = false;
  int64_t join_change_ = -1;             // the added change this process joined in (-1: none)
  int64_t epoch_first_change_ = 0;       // changes applied when the current epoch started
  std::vector<int> epoch_live_;
  int64_t epoch_ = -1, given_ = 0;  // the epoch of the last Place, and its progress
};

}  // namespace tally
