// LostSlices and FreeSpare (slices_lost.h).
#include "scheduler/slices_lost.h"

#include <vector>

namespace tally {

std::string LostSlices(const ServerChains& chains, const ServerChains& after, const std::set<int>& unready,
                     int replicas) {
  for (int c = 0; c < after.size(); ++c) {
    bool alive = false;
    for (int h : after.Holders(c)) alive |= !unready.count(h);
    if (alive) continue;
    const std::vector<int>& held = chains.Holders(c);
    std::string on;
    for (size_t i = 0; i < held.size(); ++i) {
      on += (i == 0 ? "" : i + 1 == held.size() ? " and " : ", ") + std::to_string(held[i]);
    }
    std::string receiving;
    for (int h : after.Holders(c)) receiving += " (spare " + std::to_string(h) + " still receiving them)";
    return "the slices of server " + std::to_string(c) + " are lost (held by server" +
           (held.size() > 1 ? "s " : " ") + on + ", none alive; --server-replicas " +
           std::to_string(replicas) + ")" + receiving;
  }
  return "";
}


int FreeSpare(const ServerChains& chains, const NodeIds& ids, int num_servers, const std::set<int>& dead) {
  for (int s = num_servers; s < ids.all_servers(); ++s) {
    if (!dead.count(ids.Server(s)) && chains.ChainsOf(s).empty()) return s;
  }
  return -1;
}

}  // namespace tally
