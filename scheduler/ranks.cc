#include "scheduler/ranks.h"

#include <string>

#include "net/cluster.h"

namespace tally {

void PlaceNode(const wire::Node& n, int rank, const NodeIds& ids, std::vector<wire::Node>* nodes) {
  const int id = n.role() == wire::SERVER ? ids.Server(rank) : ids.Worker(rank);
  wire::Node& slot = (*nodes)[id];
  slot = n;
  slot.set_rank(rank);
  slot.set_id(id);
}

Status AssignRanks(const std::vector<Message>& regs, const NodeIds& ids, std::vector<wire::Node>* nodes) {
  for (wire::Role role : {wire::SERVER, wire::WORKER}) {
    const int count = role == wire::SERVER ? ids.all_servers() : ids.num_workers;
    std::vector<bool> taken(count, false);
    std::vector<const wire::Node*> unranked;
    for (const Message& r : regs) {
      const wire::Node& n = r.meta.nodes(0);
      if (n.role() != role) continue;
      if (n.rank() < 0) {
        unranked.push_back(&n);
        continue;
      }
      if (n.rank() >= count || taken[n.rank()]) {
        return Status::InvalidArgument(DescribeNode(n) + " asked for rank " + std::to_string(n.rank()) +
                                       ", which is " + (n.rank() >= count ? "out of range" : "taken"));
      }
      taken[n.rank()] = true;
      PlaceNode(n, n.rank(), ids, nodes);
    }
    int next = 0;
    for (const wire::Node* n : unranked) {
      while (taken[next]) ++next;
      taken[next] = true;
      PlaceNode(*n, next, ids, nodes);
    }
  }
  return Status::Ok();
}

Status GatherTimedOut(const ClusterConfig& cfg, int all_servers, const std::vector<Message>& regs,
                      Transport* transport) {
  int servers = 0, workers = 0;
  for (const Message& r : regs) (r.meta.nodes(0).role() == wire::SERVER ? servers : workers)++;
  std::string why = "the job did not gather within " + std::to_string(cfg.register_timeout_ms) +
                    " ms (TALLY_REGISTER_TIMEOUT_MS): " + std::to_string(workers) + " of " +
                    std::to_string(cfg.num_workers) + " workers and " + std::to_string(servers) + " of " +
                    std::to_string(all_servers) + " servers registered";
  // Tell those who came, so that they do not wait for a table that never comes.
  for (size_t i = 0; i < regs.size(); ++i) {
    const wire::Node& n = regs[i].meta.nodes(0);
    int id = 1000000 + static_cast<int>(i);
    if (!transport->Connect(id, n.host(), n.port(), NodeName(n.role(), n.rank())).ok()) continue;
    Message m;
    m.meta.set_command(wire::SHUTDOWN);
    m.meta.set_error(why);
    transport->Send(id, m).ok();
  }
  return Status::Unavailable(why);
}

}  // namespace tally
