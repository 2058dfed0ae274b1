#include "data/elastic_reader.h"

#include <algorithm>
#include <utility>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

namespace tally {
namespace {

bool Contains(const std::vector<int>& ranks, int r) { return std::find(ranks.begin(), ranks.end(), r) != ranks.end(); }

nlohmann::json Ranks(const std::vector<int>& ranks) { return nlohmann::json(ranks); }

// A list of distinct ranks in [0, 2^20), or false.
bool ParseRanks(const nlohmann::json& j, std::vector<int>* out) {
  if (!j.is_array() || j.empty() || j.size() > 4096) return false;
  out->clear();
  for (const auto& r : j) {
    if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= (1 << 20)) return false;
    out->push_back(r.get<int>());
  }
  std::vector<int> sorted = *out;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

}  // namespace

std::string ElasticRecord::ToJson() const {
  nlohmann::json changes_json = nlohmann::json::array();
  for (const MembershipChange& c : changes) {
    nlohmann::json j = {{"from_step", c.from_step}, {"live", Ranks(c.live)}};
    if (c.at_once) j["at_once"] = true;
    changes_json.push_back(std::move(j));
  }
  const nlohmann::json j = {{"examples", num_examples}, {"epoch_live", Ranks(epoch_live)}, {"changes", changes_json}};
  return j.dump();
}

Status ElasticRecord::FromJson(const std::string& what, const std::string& json, ElasticRecord* out) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(what + ": metadata 'membership' " + why);
  };
  if (j.is_discarded() || !j.is_object()) return bad("is not a JSON object");
  ElasticRecord r;
  if (!j.contains("examples") || !j["examples"].is_number_integer() || j["examples"].get<int64_t>() <= 0) {
    return bad("has no positive 'examples'");
  }
  r.num_examples = j["examples"].get<int64_t>();
  if (!j.contains("epoch_live") || !ParseRanks(j["epoch_live"], &r.epoch_live)) {
    return bad("has no 'epoch_live' of distinct ranks");
  }
  if (!j.contains("changes") || !j["changes"].is_array()) return bad("has no 'changes' list");
  int64_t last = 0;
  for (const auto& c : j["changes"]) {
    MembershipChange m;
    if (!c.is_object() || !c.contains("from_step") || !c["from_step"].is_number_integer() || !c.contains("live") ||
        !ParseRanks(c["live"], &m.live)) {
      return bad("holds a change without from_step and distinct live ranks");
    }
    m.from_step = c["from_step"].get<int64_t>();
    m.at_once = c.contains("at_once") && c["at_once"].is_boolean() && c["at_once"].get<bool>();
    if (m.from_step < last) return bad("holds changes out of step order");
    last = m.from_step;
    r.changes.push_back(std::move(m));
  }
  *out = std::move(r);
  return Status::Ok();
}

Status ElasticReader::Add(const MembershipChange& c) {
  const std::vector<int>& before = added_.empty() ? epoch_live_ : added_.back().live;
  TALLY_RETURN_IF_ERROR(c.at_once ? shards_->AddChangeAtOnce(c.from_step, c.live)
                                  : shards_->AddChange(c.from_step, c.live));
  // This process joined in this change: it starts at its step, in a change that adds it.
  if (c.from_step <= first_step_ && Contains(c.live, o_.rank) && !Contains(before, o_.rank)) {
    join_change_ = static_cast<int64_t>(added_.size());
  }
  added_.push_back(c);
  return Status::Ok();
}

Status ElasticReader::Start(const ElasticStart& start) {
  const std::string where = "the checkpoint's data position (epoch " + std::to_string(start.epoch) + ", batch " +
                            std::to_string(start.batch) + ", step " + std::to_string(start.step) + ")";
  if (start.gathered.empty() || !Contains(start.gathered, o_.rank)) {
    return Status::InvalidArgument("--elastic: rank " + std::to_string(o_.rank) + " is not among the job's workers");
  }
  if (start.batch > start.step) return Status::InvalidArgument(where + ": batch after step");
  epoch_live_ = start.record.epoch_live.empty() ? start.gathered : start.record.epoch_live;
  std::sort(epoch_live_.begin(), epoch_live_.end());
  first_step_ = run_start_ = start.step;
  const int64_t epoch_start = start.step - start.batch;
  shards_ = std::make_unique<ElasticShards>(o_.num_examples, o_.batch_size, epoch_live_);
  shards_->StartAt(start.epoch, epoch_start);
  for (const MembershipChange& c : start.record.changes) {
    if (c.from_step < epoch_start || c.from_step >= start.step) {
      return Status::InvalidArgument(where + ": a change from step " + std::to_string(c.from_step) +
                                     " outside its epoch's steps so far");
    }
    Status s = Add(c);
    if (!s.ok()) return Status::InvalidArgument(where + ": " + s.message());
  }
  for (int64_t s = epoch_start; s < start.step; ++s) shards_->Advance();
  // A resumed run: the gathered workers from its first step on, applied at once (nobody has
  // read a batch since), which also applies every recorded change still pending. When none
  // is pending and they are the live workers, the cut goes on as the uninterrupted run's
  // would: the resume is exact.
  if (start.step > 0) {
    MembershipChange gathered{start.step, start.gathered, /*at_once=*/true};
    std::sort(gathered.live.begin(), gathered.live.end());
    ElasticShards next = *shards_;
    next.Advance();
    if (next.changes_applied() != static_cast<int64_t>(added_.size()) || next.live() != gathered.live) {
      TALLY_RETURN_IF_ERROR(Add(gathered));
    }
  }
  if (start.batch > 0) {  // inside the epoch: nothing was applied at its start
    epoch_ = shards_->epoch();
    given_ = shards_->given();
  }
  return Status::Ok();
}

Status ElasticReader::Hear() {
  if (!o_.heard) return Status::Ok();
  std::vector<MembershipChange> heard;
  TALLY_RETURN_IF_ERROR(o_.heard(&heard));
  for (; heard_ < heard.size(); ++heard_) {
    // The store numbers the steps of this run of the job from its start (a resumed run's
    // servers count from 0 again); the job's steps go on from the checkpoint's.
    MembershipChange c = heard[heard_];
    c.from_step += run_start_;
    TALLY_RETURN_IF_ERROR(Add(c));
  }
  return Status::Ok();
}

Status ElasticReader::Place(int64_t step, const std::function<Status()>& settle, ElasticStep* out) {
  CHECK(shards_ != nullptr) << "Place before Start";
  if (!placed_ && step > shards_->step() + 1) {
    // A joiner's first step: the job's cut up to the step before, from every change heard
    // (its own join among them, which tells it when it reads).
    first_step_ = step;
    for (int64_t s = shards_->step() + 1; s < step; ++s) {
      ElasticStep ignored;
      TALLY_RETURN_IF_ERROR(PlaceOne(s, nullptr, &ignored));
    }
  }
  placed_ = true;
  return PlaceOne(step, settle, out);
}

Status ElasticReader::PlaceOne(int64_t step, const std::function<Status()>& settle, ElasticStep* out) {
  if (step != shards_->step() + 1) {
    return Status::Internal("elastic data: step " + std::to_string(step) + " after step " +
                            std::to_string(shards_->step()));
  }
  if (shards_->NeedsChangesBefore(step) && settle) TALLY_RETURN_IF_ERROR(settle());
  TALLY_RETURN_IF_ERROR(Hear());
  shards_->Advance();
  if (shards_->epoch() != epoch_) {
    epoch_ = shards_->epoch();
    epoch_live_ = shards_->live();
    epoch_first_change_ = shards_->changes_applied();
    given_ = 0;
  }
  given_ = std::max(given_, shards_->given());
  out->epoch = shards_->epoch();
  out->index = shards_->index();
  out->epoch_batches = shards_->epoch_batches();
  out->given = given_;
  const std::vector<int>& live = shards_->live();
  out->reads = std::binary_search(live.begin(), live.end(), o_.rank) && shards_->changes_applied() > join_change_;
  out->batch = out->reads ? shards_->BatchOf(o_.rank) : shards_->NoPartBatch();
  return Status::Ok();
}

Status ElasticReader::Record(int64_t step, ElasticRecord* out) {
  TALLY_RETURN_IF_ERROR(Hear());
  ElasticRecord& r = *out;
  r = ElasticRecord();
  r.num_examples = o_.num_examples;
  r.epoch_live = epoch_live_;
  for (size_t c = static_cast<size_t>(epoch_first_change_); c < added_.size(); ++c) {
    if (added_[c].from_step < step) r.changes.push_back(added_[c]);
  }
  return Status::Ok();
}

}  // namespace tally
