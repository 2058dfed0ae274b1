// The rank a worker registering with a running --elastic job takes (docs/faults.md, "A
// worker joins"): the one it asks for (TALLY_RANK), or the lowest rank not live (worker 0
// too, once it left: it leads the job again from its join), never a rank live or still
// leaving.
//
//   int rank;
//   Status s = JoinRank(cfg, members, register_message, &rank);
//   if (s.ok()) { ... the node takes worker `rank`'s id, members.QueueJoin(rank, ...) ... }
//
// A refusal says why (a worker that does not say it can join: ClusterConfig::can_join, a
// server's REGISTER, a rank live or out of range, a worker that
// authenticated under another name); a rank whose leave is still being decided is refused
// until it is decided (the joiner sends REGISTER again every second).
#pragma once

#include <vector>

#include "base/status.h"
#include "net/cluster.h"
#include "scheduler/membership.h"

namespace tally {

Status JoinRank(const ClusterConfig& cfg, const ElasticMembership& members, const Message& m, int* rank);

// The MEMBERSHIP `change` told again to a worker that joins later (docs/wire.md, "A worker
// joins"), so that its list of changes starts with the job's: the same epoch, steps and live
// ranks, each live worker named by its entry in `nodes` (by id) now, which the joiner's node
// table holds already, so that the joiner connects to no process that has gone since.
wire::Meta RetoldMembership(const wire::Meta& change, const std::vector<wire::Node>& nodes, const NodeIds& ids);

// Whether REGISTER `m` repeats that of a worker in `nodes` (the same address and pid):
// the joiner sends it until the node table reaches it.
bool RepeatsRegister(const std::vector<wire::Node>& nodes, const Message& m);

}  // namespace tally
