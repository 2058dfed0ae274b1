// JoinRank: which rank a worker joining a running job takes (join.h).
#include "scheduler/join.h"

#include <string>

namespace tally {

Status JoinRank(const ClusterConfig& cfg, const ElasticMembership& members, const Message& m, int* rank) {
  if (m.meta.nodes_size() != 1) {
    return Status::InvalidArgument("REGISTER naming " + std::to_string(m.meta.nodes_size()) + " nodes, not one");
  }
  const wire::Node& asked = m.meta.nodes(0);
  if (asked.role() != wire::WORKER) {
    return Status::InvalidArgument("a REGISTER of a " + wire::Role_Name(asked.role()) +
                                   " after the job gathered: only workers join a running job");
  }
  if (m.meta.membership_epoch() != 1) {
    return Status::InvalidArgument("a REGISTER of a worker that cannot join a running job (membership_epoch " +
                                   std::to_string(m.meta.membership_epoch()) + ", not 1)");
  }
  int r = asked.rank();
  if (r < 0) {
    for (int c = 0; c < cfg.num_workers && r < 0; ++c) {
      if (!members.live().count(c) && !members.Pending(c)) r = c;
    }
    if (r < 0) return Status::Unavailable("every worker rank is live: the job has no place for another");
  }
  const std::string name = "worker " + std::to_string(r);
  if (r >= cfg.num_workers) return Status::InvalidArgument(name + " is out of range");
  if (members.live().count(r) || members.Pending(r)) {
    return Status::Unavailable(name + (!members.Pending(r)       ? " is live"
                                       : members.live().count(r) ? " is still leaving"
                                                                 : " is already joining"));
  }
  if (!cfg.job_secret.empty() && m.peer != NodeName(wire::WORKER, r)) {
    return Status::InvalidArgument(name + "'s REGISTER authenticated as " +
                                   (m.peer.empty() ? std::string("nobody") : m.peer));
  }
  *rank = r;
  return Status::Ok();
}

wire::Meta RetoldMembership(const wire::Meta& change, const std::vector<wire::Node>& nodes, const NodeIds& ids) {
  wire::Meta told = change;
  told.clear_nodes();
  for (const wire::Node& n : change.nodes()) *told.add_nodes() = nodes[ids.Worker(n.rank())];
  return told;
}

bool RepeatsRegister(const std::vector<wire::Node>& nodes, const Message& m) {
  if (m.meta.nodes_size() != 1 || m.meta.nodes(0).role() != wire::WORKER) return false;
  const wire::Node& asked = m.meta.nodes(0);
  for (const wire::Node& n : nodes) {
    if (n.role() == wire::WORKER && n.pid() == asked.pid() && n.port() == asked.port() &&
        n.host() == asked.host()) {
      return true;
    }
  }
  return false;
}

}  // namespace tally
