#include "data/shard.h"

#include <cmath>
#include <numeric>
#include <utility>

#include <glog/logging.h>

#include "ops/random.h"

namespace tally {

PartSizes PartSizesOf(int64_t n, int num_parts, int batch_size, bool round_batch, double max_bad_fraction) {
  PartSizes s;
  if (round_batch) {
    s.per_part = (n + num_parts - 1) / num_parts;
    s.batches_per_epoch = (s.per_part + batch_size - 1) / batch_size;
  } else {
    s.per_part = n / num_parts;
    s.batches_per_epoch = s.per_part / batch_size;
  }
  s.max_bad = static_cast<int64_t>(std::floor(max_bad_fraction * s.per_part));
  return s;
}

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

int64_t PlannedRecordAt(const std::vector<uint32_t>& perm, int64_t position, int64_t tries) {
  return perm[static_cast<size_t>((position + tries) % static_cast<int64_t>(perm.size()))];
}

std::shared_ptr<const std::vector<uint32_t>> PermutationCache::Get(int64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = perms_.find(epoch);
  if (it != perms_.end()) return it->second;
  auto perm = std::make_shared<const std::vector<uint32_t>>(EpochPermutation(n_, shuffle_, seed_, epoch));
  perms_[epoch] = perm;
  while (perms_.size() > keep_) perms_.erase(perms_.begin());
  return perm;
}

int64_t BadRecords::Note(int64_t epoch, int64_t record, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (all_.insert(record).second) LOG(WARNING) << "skipping a bad record: " << why.message();
  std::unordered_set<int64_t>& in_epoch = by_epoch_[epoch];
  in_epoch.insert(record);
  const int64_t count = static_cast<int64_t>(in_epoch.size());
  while (by_epoch_.size() > 2) by_epoch_.erase(by_epoch_.begin());
  return count;
}

int64_t BadRecords::distinct() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(all_.size());
}

}  // namespace tally
