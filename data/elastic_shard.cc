#include "data/elastic_shard.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include <glog/logging.h>

namespace tally {

ElasticShards::ElasticShards(int64_t num_examples, int batch_size, std::vector<int> live, int64_t lag)
    : n_(num_examples), batch_size_(batch_size), lag_(lag), live_(std::move(live)) {
  CHECK_GT(n_, 0);
  CHECK_GT(batch_size_, 0);
  CHECK_GE(lag_, 1);
  CHECK(!live_.empty());
  std::sort(live_.begin(), live_.end());
}

Status ElasticShards::AddChange(int64_t from_step, std::vector<int> live) {
  return Add(from_step, std::move(live), /*at_once=*/false);
}

Status ElasticShards::AddChangeAtOnce(int64_t from_step, std::vector<int> live) {
  return Add(from_step, std::move(live), /*at_once=*/true);
}

Status ElasticShards::Add(int64_t from_step, std::vector<int> live, bool at_once) {
  const std::string what = "membership change from step " + std::to_string(from_step);
  if (from_step < last_from_step_) {
    return Status::InvalidArgument(what + ": after one from step " + std::to_string(last_from_step_));
  }
  // Too late: it was due at a step already read (so some worker may have read another cut).
  if ((at_once ? from_step : from_step + lag_) <= step_ || from_step < settled_before_) {
    return Status::InvalidArgument(what + ": heard of at step " + std::to_string(step_ + 1) + ", after it was due");
  }
  std::sort(live.begin(), live.end());
  if (live.empty() || live.front() < 0 || std::adjacent_find(live.begin(), live.end()) != live.end()) {
    return Status::InvalidArgument(what + ": the live ranks must be distinct, non-negative and at least one");
  }
  last_from_step_ = from_step;
  pending_.push_back(Change{from_step, std::move(live), at_once});
  return Status::Ok();
}

void ElasticShards::StartAt(int64_t epoch, int64_t step) {
  CHECK_LT(step_, 0) << "StartAt after Advance";
  CHECK(pending_.empty()) << "StartAt after AddChange";
  CHECK_GE(epoch, 0);
  CHECK_GE(step, 0);
  epoch_ = epoch - 1;
  step_ = step - 1;
  epoch_start_ = segment_start_ = segment_end_ = settled_before_ = last_from_step_ = step;
}

bool ElasticShards::Due(const Change& c, int64_t at) const {
  if (c.at_once) return c.from_step <= at;
  return c.from_step + lag_ <= at || (at >= segment_end_ && c.from_step < at);
}

const std::vector<ElasticShards::Given>* ElasticShards::History(int rank) const {
  for (const auto& [r, given] : history_) {
    if (r == rank) return &given;
  }
  return nullptr;
}

void ElasticShards::ApplyDue(int64_t at) {
  // A change due makes every one before it due (one decided at once follows lagged ones).
  size_t due = 0;
  for (size_t c = 0; c < pending_.size(); ++c) {
    if (Due(pending_[c], at)) due = c + 1;
  }
  if (due == 0) return;
  // What the live ranks of the segment have not read yet: the rest of each part.
  std::vector<int64_t> rest;
  const int64_t read = std::min(at, segment_end_) - segment_start_;
  for (size_t i = 0; i + 1 < offsets_.size(); ++i) {
    const int64_t begin = std::min(offsets_[i] + read * batch_size_, offsets_[i + 1]);
    rest.insert(rest.end(), remaining_->begin() + begin, remaining_->begin() + offsets_[i + 1]);
  }
  // ... and what each leaver was given from its from_step on, which it never read.
  // Given back once: a rank that leaves again later gets back only what it was given since.
  for (auto& [rank, given] : history_) {
    int64_t left_at = -1;
    for (size_t c = 0; c < due && left_at < 0; ++c) {
      if (!std::binary_search(pending_[c].live.begin(), pending_[c].live.end(), rank)) left_at = pending_[c].from_step;
    }
    if (left_at < 0) continue;
    for (const Given& g : given) {
      if (g.step >= left_at && g.step < at) rest.insert(rest.end(), g.positions.begin(), g.positions.end());
    }
    given.clear();
  }
  live_ = pending_[due - 1].live;
  applied_ += static_cast<int64_t>(due);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(due));
  if (at >= segment_end_) settled_before_ = at;
  if (rest.empty()) {  // the epoch is done: Advance starts the next
    segment_end_ = at;
    return;
  }
  std::sort(rest.begin(), rest.end());
  StartSegment(std::move(rest), at);
}

std::vector<int64_t> ElasticShards::Offsets(int64_t r, int64_t k) {
  std::vector<int64_t> offsets(static_cast<size_t>(k) + 1);
  for (int64_t i = 0; i <= k; ++i) offsets[i] = i * r / k;  // sizes differ by at most one
  return offsets;
}

int64_t ElasticShards::Batches(int64_t r, int64_t k, int batch_size) {
  const int64_t largest = (r + k - 1) / k;
  return std::max<int64_t>(1, (largest + batch_size - 1) / batch_size);
}

void ElasticShards::StartSegment(std::vector<int64_t> remaining, int64_t at) {
  const int64_t r = static_cast<int64_t>(remaining.size());
  const int64_t k = static_cast<int64_t>(live_.size());
  remaining_ = std::make_shared<const std::vector<int64_t>>(std::move(remaining));
  offsets_ = Offsets(r, k);
  segment_start_ = at;
  segment_end_ = at + Batches(r, k, batch_size_);
}

void ElasticShards::Advance() {
  const int64_t at = step_ + 1;
  ApplyDue(at);
  if (at >= segment_end_) {
    settled_before_ = at;
    ++epoch_;
    epoch_start_ = at;
    history_.clear();
    std::vector<int64_t> all(n_);
    std::iota(all.begin(), all.end(), int64_t{0});
    StartSegment(std::move(all), at);
  }
  step_ = at;
  // Keep what each live rank is given for the last `lag` steps: a change applied up to
  // `lag` steps after its from_step gives the leaver's share back.
  std::vector<std::pair<int, std::vector<Given>>> kept;
  for (size_t i = 0; i < live_.size(); ++i) {
    std::vector<Given> given;
    if (const std::vector<Given>* old = History(live_[i])) {
      for (const Given& g : *old) {
        if (g.step > at - lag_) given.push_back(g);
      }
    }
    ShardBatch b = Batch(i, at - segment_start_);
    b.positions.resize(b.positions.size() - static_cast<size_t>(b.pad));
    given.push_back(Given{at, std::move(b.positions)});
    kept.emplace_back(live_[i], std::move(given));
  }
  history_ = std::move(kept);
}

ShardBatch ElasticShards::CutBatch(const int64_t* remaining, int64_t r, const std::vector<int64_t>& offsets,
                                   size_t part, int64_t b, int batch_size) {
  ShardBatch out;
  const int64_t begin = offsets[part], size = offsets[part + 1] - begin;
  auto at = [&](int64_t i) { return remaining != nullptr ? remaining[i] : i; };
  for (int64_t j = 0; j < batch_size; ++j) {
    const int64_t q = b * batch_size + j;
    if (q < size) {
      out.positions.push_back(at(begin + q));
    } else {  // a short part repeats its own first positions; an empty one the segment's
      out.positions.push_back(size > 0 ? at(begin + q % size) : at(q % r));
      ++out.pad;
    }
  }
  return out;
}

ShardBatch ElasticShards::BatchOf(int rank) const {
  const auto it = std::lower_bound(live_.begin(), live_.end(), rank);
  if (step_ < 0 || it == live_.end() || *it != rank) return ShardBatch();
  return Batch(static_cast<size_t>(it - live_.begin()), step_ - segment_start_);
}

ShardBatch ElasticShards::NoPartBatch() const {
  ShardBatch out;
  if (step_ < 0) return out;
  const int64_t r = static_cast<int64_t>(remaining_->size());
  for (int64_t j = 0; j < batch_size_; ++j) out.positions.push_back((*remaining_)[j % r]);
  out.pad = batch_size_;
  return out;
}

int64_t ElasticShards::given() const {
  if (step_ < 0) return 0;
  int64_t given = n_ - static_cast<int64_t>(remaining_->size());
  const int64_t read = (step_ - segment_start_) * batch_size_;
  for (size_t i = 0; i + 1 < offsets_.size(); ++i) given += std::min(read, offsets_[i + 1] - offsets_[i]);
  return given;
}

std::shared_ptr<const ElasticShards::Forecast> ElasticShards::ForecastOf(int rank) const {
  CHECK_GE(step_, 0) << "ForecastOf before Advance";
  auto f = std::make_shared<Forecast>();
  f->n_ = n_;
  f->k_ = static_cast<int64_t>(live_.size());
  f->batch_size_ = batch_size_;
  const auto it = std::lower_bound(live_.begin(), live_.end(), rank);
  f->part_ = it != live_.end() && *it == rank ? static_cast<int>(it - live_.begin()) : -1;
  f->remaining_ = remaining_;
  f->offsets_ = offsets_;
  f->segment_start_ = segment_start_;
  f->segment_end_ = segment_end_;
  f->epoch_ = epoch_;
  f->epoch_start_ = epoch_start_;
  return f;
}

ShardBatch ElasticShards::Forecast::At(int64_t step, int64_t* epoch, int64_t* index) const {
  if (step < segment_end_) {
    *epoch = epoch_;
    *index = step - epoch_start_;
    const int64_t r = static_cast<int64_t>(remaining_->size());
    if (part_ < 0) {  // NoPartBatch's
      ShardBatch out;
      for (int64_t j = 0; j < batch_size_; ++j) out.positions.push_back((*remaining_)[j % r]);
      out.pad = batch_size_;
      return out;
    }
    return CutBatch(remaining_->data(), r, offsets_, static_cast<size_t>(part_), step - segment_start_, batch_size_);
  }
  // Later epochs: all n positions cut over the same ranks.
  const int64_t per_epoch = Batches(n_, k_, batch_size_);
  *epoch = epoch_ + 1 + (step - segment_end_) / per_epoch;
  *index = (step - segment_end_) % per_epoch;
  if (part_ < 0) {
    ShardBatch out;
    for (int64_t j = 0; j < batch_size_; ++j) out.positions.push_back(j % n_);
    out.pad = batch_size_;
    return out;
  }
  return CutBatch(nullptr, n_, Offsets(n_, k_), static_cast<size_t>(part_), *index, batch_size_);
}

}  // namespace tally
