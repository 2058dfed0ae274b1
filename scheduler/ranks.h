// The ranks of the nodes gathered at a job's start: each REGISTER that asked for a rank gets
// it (refused when out of range or taken twice), the others the lowest free ranks of their
// role, in the order they registered.
//
//   std::vector<wire::Node> nodes(ids.size());           // slot 0: the scheduler's own
//   Status s = AssignRanks(regs, ids, &nodes);           // nodes[id] for every id
#pragma once

#include <vector>

#include "base/status.h"
#include "net/cluster.h"
#include "net/node_ids.h"
#include "net/transport.h"

namespace tally {

// Fills nodes[id] for the servers (spares included) and workers of `ids` from `regs` (one
// node each), leaving nodes[0] as it is. `nodes` has one slot per id.
Status AssignRanks(const std::vector<Message>& regs, const NodeIds& ids, std::vector<wire::Node>* nodes);

// Puts node n at `rank` of its role: nodes[id] becomes n with that rank and id (a gathered
// node, or a worker joining a running job at its rank).
void PlaceNode(const wire::Node& n, int rank, const NodeIds& ids, std::vector<wire::Node>* nodes);

// The job did not gather within cfg.register_timeout_ms: tells each node in `regs` so
// (SHUTDOWN naming why), so that none waits for a table that never comes, and returns why
// (Unavailable: how many of each role registered).
Status GatherTimedOut(const ClusterConfig& cfg, int all_servers, const std::vector<Message>& regs,
                      Transport* transport);

}  // namespace tally
