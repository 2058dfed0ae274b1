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
#pragma once

#include <functional>
#include <memory>

#include "net/cluster.h"

namespace tally {

Status RunScheduler(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
                    const std::function<void()>& gathered = nullptr,
                    std::function<void(const Status&)> refused = nullptr);

}  // namespace tally
