// What the scheduler makes of lost servers (--server-replicas, --spare-servers): which
// slices are lost with them, and which spare takes a lost server's place.
//
//   ServerChains after = chains;
//   after.Lose(1);
//   std::string lost = LostSlices(chains, after, unready_spares, /*replicas=*/1);
//   if (lost.empty()) { int spare = FreeSpare(chains, ids, num_servers, dead); ... }
#pragma once

#include <set>
#include <string>

#include "net/node_ids.h"
#include "net/server_chains.h"

namespace tally {

// "the slices of server 1 are lost (held by servers 1 and 2, none alive; ...)" when some
// chain of `after` has no holder left but spares still receiving it (`unready`, ranks);
// empty otherwise. `chains`: the holders before the loss.
std::string LostSlices(const ServerChains& chains, const ServerChains& after, const std::set<int>& unready,
                       int replicas);

// The lowest spare (rank num_servers and up) alive (its id not in `dead`) and holding
// nothing, or -1.
int FreeSpare(const ServerChains& chains, const NodeIds& ids, int num_servers, const std::set<int>& dead);

}  // namespace tally
