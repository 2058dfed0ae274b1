// ChainRouter: where the worker sends a slice now, under --server-replicas and
// --spare-servers (docs/faults.md). The slices of server rank c make up chain c; the chain's
// first live holder serves it. When the scheduler says a server is lost (SERVER_LOST), the
// chains it held are served by their next holder, and a spare, if one is named, joins them
// last. The channel (dist_channel.h) asks it where a request goes and hands its reroute to
// the request layer (net/requests.h); without replicas every chain is its server alone and
// Route(c) is server c.
//
//   ChainRouter router([cluster] { return cluster->ids(); }, cluster->server_replicas(),
//                      /*spares_take_places=*/true);
//   int node = router.Route(/*chain=*/0);          // server 0's node id while it lives
//   router.Lose(/*server_rank=*/0, /*spare=*/3);   // server 1 serves chain 0 now; 3 joins it
//   PendingRequest p;                              // a request of chain 0 sent to server 0
//   p.command = wire::PUSH;
//   p.chain = 0;
//   bool drop = router.Reroute(&p, &node);         // false: node is server 1's now
//
// Thread-safety: every method may be called from any thread (its own lock, held by no call
// into another class, ids() included).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <functional>

#include "net/node_ids.h"
#include "net/requests.h"
#include "net/server_chains.h"

namespace tally {

class ChainRouter {
 public:
  // ids: the job's node ids now (Cluster::ids; the workers' number may change, and with it
  // a spare's id); replicas: --server-replicas; spares_take_places: false under dist_async
  // (a spare takes no place in the chains).
  ChainRouter(std::function<NodeIds()> ids, int replicas, bool spares_take_places);

  // The node id now serving chain `chain` (a server's rank); a rank beyond the chains (a
  // spare's own requests) is that server's node.
  int Route(int chain) const;
  // The ranks of the servers holding server `rank`'s slices, the serving one first.
  std::vector<int> Holders(int server_rank) const;
  // Server `server_rank` is lost; spare >= 0 takes its place (unless !spares_take_places).
  // Returns the chains it held, for Describe.
  std::vector<int> Lose(int server_rank, int spare);
  // "1 by server 2, 3 by server 0": who serves the given chains now.
  std::string Describe(const std::vector<int>& chains) const;
  // The request layer's reroute (Requests::RerouteFn) for a request to a lost server: a
  // request of a chain goes to the chain's serving server; copies for backups and requests
  // no other server needs (INIT, SET_LR, SET_OPTIMIZER) are dropped (true).
  bool Reroute(PendingRequest* p, int* node) const;

 private:
  int RouteLocked(int chain) const;  // REQUIRES: mu_ held

  const std::function<NodeIds()> ids_;
  const bool spares_take_places_;
  mutable std::mutex mu_;
  ServerChains chains_;  // GUARDED_BY(mu_)
};

}  // namespace tally
