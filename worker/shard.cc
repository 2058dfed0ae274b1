#include "worker/shard.h"

#include <numeric>
#include <utility>

#include "ops/random.h"

namespace tally {

BatchPosition PositionOf(int64_t seq, int64_t first_epoch, int64_t first_batch, int64_t batches_per_epoch) {
  const int64_t position = first_batch + seq;
  return BatchPosition{first_epoch + position / batches_per_epoch, position % batches_per_epoch};
}

std::vector<uint32_t> EpochPermutation(uint32_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  if (shuffle) {
    Rng rng(SplitMix64Hash(SplitMix64Hash(seed) ^ static_cast<uint64_t>(epoch)));
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Below(static_cast<uint32_t>(i))]);
  }
  return perm;
}

int64_t PartSlot(int64_t position_in_part, int64_t per_part, int64_t part_start, int64_t n, int* pad) {
  int64_t k = position_in_part;
  if (k >= per_part) ++*pad;  // round_batch: the last batch wraps to the part's start
  k %= per_part;
  if (part_start + k >= n) ++*pad;  // the last part wraps to the permutation's start
  return k;
}

int64_t RecordAt(const std::vector<uint32_t>& perm, int64_t part_start, int64_t k, int64_t tries, int64_t per_part) {
  const int64_t n = static_cast<int64_t>(perm.size());
  return perm[(part_start + (k + tries) % per_part) % n];
}

}  // namespace tally
