// ElasticMembership: the scheduler's decision of a leave's step (membership.h).
#include "scheduler/membership.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tally {

ElasticMembership::ElasticMembership(int num_workers, std::string log_path) : log_path_(std::move(log_path)) {
  for (int r = 0; r < num_workers; ++r) live_.insert(r);
}

void ElasticMembership::Queue(int rank, const std::string& why) {
  if (!live_.count(rank) || Pending(rank)) return;
  queued_.push_back(Queued{rank, why, false});
}

void ElasticMembership::QueueJoin(int rank, const std::string& why) {
  if (rank < 0 || live_.count(rank) || Pending(rank)) return;
  queued_.push_back(Queued{rank, why, true});
}

bool ElasticMembership::Pending(int rank) const {
  if (deciding_ && leaver_ == rank) return true;
  for (const Queued& q : queued_) {
    if (q.rank == rank) return true;
  }
  return false;
}

bool ElasticMembership::Start(int* rank) {
  if (deciding_ || queued_.empty()) return false;
  leaver_ = queued_.front().rank;
  why_ = queued_.front().why;
  joining_ = queued_.front().join;
  queued_.pop_front();
  deciding_ = true;
  expected_.clear();
  reports_.clear();
  *rank = leaver_;
  return true;
}

void ElasticMembership::Expect(const std::set<int>& servers) { expected_ = servers; }

bool ElasticMembership::Report(int server, int64_t epoch, int64_t through, int64_t applied) {
  if (!deciding_ || epoch != epoch_ + 1 || !expected_.count(server)) return false;
  reports_[server] = {through, applied};
  return reports_.size() == expected_.size();
}

bool ElasticMembership::Lost(int server) {
  if (!deciding_ || !expected_.erase(server)) return false;
  reports_.erase(server);
  return reports_.size() == expected_.size();
}

Status ElasticMembership::Decide(int64_t* from_step, int64_t* skip_step) {
  int64_t through = std::numeric_limits<int64_t>::max(), applied = -1;
  for (const auto& [server, r] : reports_) {
    through = std::min(through, r.first);
    applied = std::max(applied, r.second);
  }
  deciding_ = false;
  last_applied_ = applied;
  last_async_ = through == std::numeric_limits<int64_t>::max();
  *skip_step = -1;
  if (joining_) return DecideJoin(through == std::numeric_limits<int64_t>::max(), applied, from_step);
  if (through == std::numeric_limits<int64_t>::max()) {
    *from_step = applied + 1;  // no slice anywhere (dist_async reports none): after the last step
  } else {
    *from_step = through + 1;
    if (applied == through + 1) *skip_step = applied;
    if (applied > through + 1) {
      return Status::Internal("worker " + std::to_string(leaver_) + "'s pushes are counted through step " +
                              std::to_string(through) + " on some slice, but step " + std::to_string(applied) +
                              " is applied on another");
    }
  }
  auto recorded = replay_.find(epoch_ + 1);
  if (recorded != replay_.end() && recorded->second.first == *from_step) *skip_step = recorded->second.second;
  live_.erase(leaver_);
  ++epoch_;
  if (live_.empty()) return Status::Unavailable("worker " + std::to_string(leaver_) + " was the last live worker");
  return Append(*from_step, *skip_step);
}

// A join: the first step no worker has pushed anywhere (membership.h).
Status ElasticMembership::DecideJoin(bool async, int64_t applied, int64_t* from_step) {
  *from_step = applied + (async ? 1 : 2);
  auto recorded = replay_.find(epoch_ + 1);
  if (recorded != replay_.end()) *from_step = std::max(*from_step, recorded->second.first);
  live_.insert(leaver_);
  ++epoch_;
  return Append(*from_step, -1);
}

// One line of JSON per change (docs/faults.md, "membership.jsonl").
Status ElasticMembership::Append(int64_t from_step, int64_t skip_step) const {
  if (log_path_.empty()) return Status::Ok();
  std::string live;
  for (int r : live_) live += (live.empty() ? "" : ", ") + std::to_string(r);
  std::string why;
  for (char c : why_) {
    if (c == '"' || c == '\\') why += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) why += c;
  }
  const std::string line = "{\"epoch\": " + std::to_string(epoch_) + ", \"from_step\": " + std::to_string(from_step) +
                           (skip_step >= 0 ? ", \"skip_step\": " + std::to_string(skip_step) : std::string()) +
                           (joining_ ? ", \"joined\": [" : ", \"left\": [") + std::to_string(leaver_) + "], \"live\": [" + live + "], \"why\": \"" +
                           why + "\"}\n";
  FILE* f = std::fopen(log_path_.c_str(), "a");
  if (f == nullptr) return Status::Unavailable(log_path_ + ": " + std::strerror(errno));
  const bool ok = std::fputs(line.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !ok) return Status::Unavailable(log_path_ + ": write failed");
  return Status::Ok();
}

}  // namespace tally
