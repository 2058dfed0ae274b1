// Which record fills each sample of a batch: the sharding, per-epoch shuffling and bad-record
// accounting that Loader (data/loader.h, where the rules are described) and GpuLoader
// (data/gpu_loader.h) share, so that both read the same records in the same order for the
// same config and give up on a pack at the same point.
//
//   PartSizes sizes = PartSizesOf(n, cfg.num_parts, cfg.batch_size, cfg.round_batch, cfg.max_bad_fraction);
//   PermutationCache perms(n, cfg.shuffle, cfg.seed, /*keep=*/2);
//   BatchPosition at = PositionOf(seq, cfg.first_epoch, cfg.first_batch, batches_per_epoch);
//   std::shared_ptr<const std::vector<uint32_t>> perm = perms.Get(at.epoch);
//   int pad = 0;
//   int64_t k = PartSlot(at.index * batch_size + j, per_part, part_start, n, &pad);
//   int64_t record = RecordAt(*perm, part_start, k, /*tries=*/0, per_part);
//
// The functions are pure; PermutationCache and BadRecords lock themselves. All are safe on
// any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "base/status.h"

namespace tally {

// How the n records of a pack are cut into parts and batches.
struct PartSizes {
  int64_t per_part = 0;           // records of each part
  int64_t batches_per_epoch = 0;  // 0: too few records for one batch of every part
  int64_t max_bad = 0;            // bad records one epoch of a part may hold
};
PartSizes PartSizesOf(int64_t n, int num_parts, int batch_size, bool round_batch, double max_bad_fraction);

struct BatchPosition {
  int64_t epoch = 0;
  int64_t index = 0;  // within the epoch
};

// Batch number `seq`, counted from the loader's first batch.
BatchPosition PositionOf(int64_t seq, int64_t first_epoch, int64_t first_batch, int64_t batches_per_epoch);

// The order of the n records in `epoch`: identity without shuffle, else Fisher-Yates from a
// generator seeded by (seed, epoch), the same on every part.
std::vector<uint32_t> EpochPermutation(uint32_t n, bool shuffle, uint64_t seed, int64_t epoch);

// The position in the part's list of the sample at `position_in_part` (index * batch_size + j),
// wrapping past the part's end and past the permutation's end (round_batch); each wrap adds
// one to *pad, the count of repeated samples.
int64_t PartSlot(int64_t position_in_part, int64_t per_part, int64_t part_start, int64_t n, int* pad);

// The record at part position k, or, after `tries` bad records, the one `tries` further on.
int64_t RecordAt(const std::vector<uint32_t>& perm, int64_t part_start, int64_t k, int64_t tries, int64_t per_part);

// --elastic's plan (LoaderConfig::plan): the record at `position` of the epoch's permutation,
// or, after `tries` bad records, the one `tries` further on (wrapping).
int64_t PlannedRecordAt(const std::vector<uint32_t>& perm, int64_t position, int64_t tries);

// EpochPermutation of the last `keep` epochs asked for, each computed once (the threads of a
// loader work on two or three epochs at an epoch's boundary).
class PermutationCache {
 public:
  PermutationCache(uint32_t n, bool shuffle, uint64_t seed, size_t keep)
      : n_(n), shuffle_(shuffle), seed_(seed), keep_(keep) {}
  std::shared_ptr<const std::vector<uint32_t>> Get(int64_t epoch);

 private:
  const uint32_t n_;
  const bool shuffle_;
  const uint64_t seed_;
  const size_t keep_;
  std::mutex mu_;
  std::map<int64_t, std::shared_ptr<const std::vector<uint32_t>>> perms_;  // GUARDED_BY(mu_)
};

// The records that failed to read, unpack or decode: each logged once, and counted per epoch
// (the last two epochs are kept).
class BadRecords {
 public:
  // Counts `record` as bad in `epoch`; returns how many distinct bad records the epoch holds.
  int64_t Note(int64_t epoch, int64_t record, const Status& why);
  // Distinct bad records met so far, in any epoch.
  int64_t distinct() const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<int64_t> all_;                                  // GUARDED_BY(mu_)
  std::map<int64_t, std::unordered_set<int64_t>> by_epoch_;          // GUARDED_BY(mu_)
};

}  // namespace tally
