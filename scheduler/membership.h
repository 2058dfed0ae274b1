// The scheduler's record of which workers are live under --elastic (docs/faults.md,
// "Elastic workers"): leaves queued one at a time, the servers' reports of how far the
// leaver's pushes are counted, the step the change starts from, and membership.jsonl.
//
//   WorkerMembership m(/*num_workers=*/4, "/ckpt/membership.jsonl");
//   m.Queue(2, "worker 2 stopped answering");
//   int rank;
//   if (m.Start(&rank)) { ... send MEMBERSHIP_PREPARE to the servers m.Expect({1, 2}) ... }
//   if (m.Report(1, m.epoch() + 1, /*through=*/29, /*applied=*/29) && m.Report(2, ...)) {
//     int64_t from, skip;
//     Status s = m.Decide(&from, &skip);  // from 30: a step before 30 counts worker 2's push
//   }
//
// The decision: every slice of every server counts the leaver's pushes through its step
// `through`, and has applied steps up to its `applied`. The change starts from
// F = min(through) + 1: no step before it lacks the leaver's push anywhere. When no slice
// applied step F either (max(applied) < F), that is all. When one did (the leaver died
// between its pushes of step F, after the others had pushed theirs there), step F is
// skipped on every slice (*skip_step = F): rolled back where it was applied, as a step with
// a non-finite gradient is, so that it counts the leaver's push nowhere. A slice can be at
// most one step ahead of another (the others' pushes of F + 1 wait for every pull of F).
//
// A join (QueueJoin: a worker registering with the running job under a rank not live) is
// decided from the same reports: every server holds its steps while it is decided, a slice
// is at most one step ahead of another and the workers' pushes reach at most one step past
// the newest applied, so F = max(applied) + 2 is the first step no worker has pushed
// anywhere (dist_async, which reports no slice: max(applied) + 1). From F on every
// server's synchronous step waits for the joiner's push too; nothing is skipped.
//
// Replay (--membership-replay): the run's changes by epoch; a leave decided at the
// recorded step takes the recorded step to skip, which the replay's clean leave does not
// reproduce by itself; a join starts from the recorded step when it is not decided later.
//
// Thread-safety: none; the scheduler's one thread uses it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally {

class ElasticMembership {
 public:
  ElasticMembership(int num_workers, std::string log_path);

  // Worker `rank` leaves, for the reason given (logged and in membership.jsonl).
  void Queue(int rank, const std::string& why);
  // Worker `rank`, not live, joins the job (logged and in membership.jsonl as "joined").
  void QueueJoin(int rank, const std::string& why);
  // Starts the next queued change when none is being decided: true and its leaver (or
  // joiner: joining()).
  bool Start(int* rank);
  bool deciding() const { return deciding_; }
  bool joining() const { return deciding_ && joining_; }
  // Whether `rank` is queued or being decided (a leave or a join).
  bool Pending(int rank) const;
  // The servers (node ids) whose reports the change waits for.
  void Expect(const std::set<int>& servers);
  // A server's MEMBERSHIP_REPORT of the change being decided (epoch() + 1); true once every
  // expected server has reported. A server lost meanwhile: Lost (true likewise).
  bool Report(int server, int64_t epoch, int64_t through, int64_t applied);
  bool Lost(int server);
  // Ends the change: *from_step, the step every server skips (*skip_step; -1: none; never
  // for a join), the new epoch and live set, the log line appended.
  Status Decide(int64_t* from_step, int64_t* skip_step);
  // The changes of the run replayed: by epoch, (from_step, skip_step).
  void Replay(std::map<int64_t, std::pair<int64_t, int64_t>> changes) { replay_ = std::move(changes); }

  int64_t epoch() const { return epoch_; }
  // The last decided change's max(applied) over the reports (-1: none applied): a joiner's
  // MEMBERSHIP carries it (docs/wire.md, "A worker joins").
  int64_t last_applied() const { return last_applied_; }
  // Whether the last decided change had no slice reported (dist_async: no common step).
  bool async() const { return last_async_; }
  const std::set<int>& live() const { return live_; }
  int leaver() const { return leaver_; }
  const std::string& why() const { return why_; }

 private:
  Status DecideJoin(bool async, int64_t applied, int64_t* from_step);
  Status Append(int64_t from_step, int64_t skip_step) const;

  const std::string log_path_;
  std::set<int> live_;  // ranks
  int64_t epoch_ = 0;
  struct Queued {
    int rank;
    std::string why;
    bool join;
  };
  std::deque<Queued> queued_;
  bool deciding_ = false;
  bool joining_ = false;
  int leaver_ = -1;
  std::string why_;
  std::set<int> expected_;
  std::map<int, std::pair<int64_t, int64_t>> reports_;  // by server id: (through, applied)
  std::map<int64_t, std::pair<int64_t, int64_t>> replay_;
  int64_t last_applied_ = -1;
  bool last_async_ = false;
};

}  // namespace tally
