// ServerChains: which servers hold each chain's slices (--server-replicas), as servers are
// lost and spares (--spare-servers) take their places.
//
//   ServerChains chains(/*num_servers=*/3, /*replicas=*/1);
//   chains.Lose(0, /*spare=*/3);               // server 0 died, spare 3 takes its place
//   int primary = chains.Holders(0).front();   // 1 serves chain 0 now; 3 holds a copy
//
// Chain c starts as ReplicaChain(c, replicas, num_servers); its first holder serves it.
// A lost server leaves every chain; the spare that takes its place joins, last, each chain
// the lost one was in, so the server that serves a chain never changes but by a loss (the
// spare holds nothing until that server sends it the chain's slices, kv_server_replica.cc).
// The scheduler sends every node the same SERVER_LOST notices in the same order, and each
// node applies them here, so all agree on who serves what. A plain value.
#pragma once

#include <algorithm>
#include <vector>

#include "net/node_ids.h"

namespace tally {

class ServerChains {
 public:
  ServerChains() = default;
  ServerChains(int num_servers, int replicas) {
    for (int c = 0; c < num_servers; ++c) holders_.push_back(ReplicaChain(c, replicas, num_servers));
  }

  int size() const { return static_cast<int>(holders_.size()); }
  // The live holders of chain c, the one serving it first; empty when every one is lost.
  const std::vector<int>& Holders(int chain) const { return holders_.at(chain); }
  bool Lost(int rank) const { return std::count(lost_.begin(), lost_.end(), rank) > 0; }
  bool Holds(int rank, int chain) const {
    const std::vector<int>& h = holders_.at(chain);
    return std::find(h.begin(), h.end(), rank) != h.end();
  }
  // The chains `rank` holds now.
  std::vector<int> ChainsOf(int rank) const {
    std::vector<int> out;
    for (int c = 0; c < size(); ++c) {
      if (Holds(rank, c)) out.push_back(c);
    }
    return out;
  }

  // Server `rank` is lost; spare >= 0 takes its place in every chain it held.
  void Lose(int rank, int spare = -1) {
    if (Lost(rank)) return;
    lost_.push_back(rank);
    for (std::vector<int>& h : holders_) {
      auto it = std::find(h.begin(), h.end(), rank);
      if (it == h.end()) continue;
      h.erase(it);
      if (spare >= 0 && !Lost(spare)) h.push_back(spare);
    }
  }

 private:
  std::vector<std::vector<int>> holders_;  // by chain
  std::vector<int> lost_;
};

}  // namespace tally
