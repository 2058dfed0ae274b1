// Which record fills each sample of a batch: the sharding and per-epoch shuffling that
// Loader (worker/loader.h, where the rules are described) and GpuLoader (worker/gpu_loader.h)
// share, so that both read the same records in the same order for the same config.
//
//   BatchPosition at = PositionOf(seq, cfg.first_epoch, cfg.first_batch, batches_per_epoch);
//   std::vector<uint32_t> perm = EpochPermutation(n, cfg.shuffle, cfg.seed, at.epoch);
//   int pad = 0;
//   int64_t k = PartSlot(at.index * batch_size + j, per_part, part_start, n, &pad);
//   int64_t record = RecordAt(perm, part_start, k, /*tries=*/0, per_part);
//
// Pure functions of their arguments; safe on any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace tally {

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

}  // namespace tally
