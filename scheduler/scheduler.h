// The scheduler: the one node every other node registers with. It assigns ranks and ids,
// sends everyone the node table, runs barriers, watches heartbeats, declares a silent node
// dead (and tells everyone, which ends the job), and ends the job when every worker is done.
//
//   ClusterConfig cfg;                      // role scheduler, from DMLC_* variables
//   Status s = RunScheduler(cfg, NewZmqTransport());   // returns when the job ends
//
// Ranks: a node may ask for one (TALLY_RANK, as tools/launch.py sets it); the others get
// the free ranks in order of registration. Ids: 0 scheduler, 1..M servers, M+1..M+N workers.
// Returns Ok when every worker finished; otherwise why the job failed (a node died, the
// job did not gather within register_timeout_ms, two nodes asked for one rank).
// `gathered`, when given, runs once every node has registered and has the node table.
// Messages a node may not send to the scheduler (net/command_rules.h: a server's
// WORKER_DONE, a worker's SHUTDOWN, a BARRIER of a group its sender is not in, an id that is
// no node's) are logged, counted and dropped; `refused`, when given, is told of each.
//
// --elastic (SchedulerOptions; docs/faults.md, "Elastic workers"): a worker that stops
// answering, or says it leaves (LEAVE, on a SIGTERM of its own), leaves the job instead of
// ending it. One leave at a time: the scheduler asks every live server how far the leaver's
// pushes are counted (MEMBERSHIP_PREPARE, MEMBERSHIP_REPORT), decides the step the change
// starts from, and the step skipped everywhere when the leaver died between its pushes of
// one step (scheduler/membership.h), tells every node (MEMBERSHIP), appends the change to
// membership_log, and sends a leaver still alive SHUTDOWN. The job then ends when every live
// worker is done. Worker 0 may leave too: the lowest live rank leads the job (checkpoints,
// a joiner's loss scale, the stop on SIGTERM; docs/faults.md, "The lead"). A worker that registers with the running job saying it can join
// (TALLY_JOIN=1) is admitted at a rank not live (scheduler/join.h), unless a live worker has
// finished already; it gets the node table and then every MEMBERSHIP so far, and its join is
// decided with the servers as a leave is (its MEMBERSHIP carries the servers' applied_max).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "net/cluster.h"

namespace tally {

// The end of the SHUTDOWN error a joiner gets when the job's last step came before its first
// (the late-join race, docs/faults.md): `tally train` exits 0 on it, saying so.
constexpr char kEndedBeforeItsFirstStep[] = "the job ended before this worker's first step";

struct SchedulerOptions {
  bool elastic = false;
  std::string membership_log;  // membership.jsonl's path; empty: none written
  // --membership-replay: the replayed run's changes by epoch, (from_step, skip_step).
  std::map<int64_t, std::pair<int64_t, int64_t>> replay;
};

Status RunScheduler(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
                    const std::function<void()>& gathered = nullptr,
                    std::function<void(const Status&)> refused = nullptr,
                    const SchedulerOptions& options = SchedulerOptions());

}  // namespace tally
