#include "kvstore/chain_router.h"

#include <utility>

namespace tally {

ChainRouter::ChainRouter(std::function<NodeIds()> ids, int replicas, bool spares_take_places)
    : ids_(std::move(ids)), spares_take_places_(spares_take_places), chains_(ids_().num_servers, replicas) {}

int ChainRouter::RouteLocked(int chain) const {
  if (chain >= chains_.size()) return ids_().Server(chain);  // a spare's own requests
  const std::vector<int>& holders = chains_.Holders(chain);
  // None left: the scheduler ends the job.
  return ids_().Server(holders.empty() ? chain : holders.front());
}

int ChainRouter::Route(int chain) const {
  std::lock_guard<std::mutex> l(mu_);
  return RouteLocked(chain);
}

std::vector<int> ChainRouter::Holders(int server_rank) const {
  std::lock_guard<std::mutex> l(mu_);
  return chains_.Holders(server_rank);
}

std::vector<int> ChainRouter::Lose(int server_rank, int spare) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<int> held = chains_.ChainsOf(server_rank);
  chains_.Lose(server_rank, spares_take_places_ ? spare : -1);
  return held;
}

std::string ChainRouter::Describe(const std::vector<int>& chains) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string served;
  for (int c : chains) {
    served += (served.empty() ? "" : ", ") + std::to_string(c) + " by server " +
              std::to_string(ids_().ServerRank(RouteLocked(c)));
  }
  return served;
}

bool ChainRouter::Reroute(PendingRequest* p, int* node) const {
  if (p->replica_copy || !IsKeyCommand(p->command) || p->chain < 0) return true;
  std::lock_guard<std::mutex> l(mu_);
  *node = RouteLocked(p->chain);
  return false;
}

}  // namespace tally
