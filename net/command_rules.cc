// The table of who may send what (command_rules.h, docs/wire.md).
#include "net/command_rules.h"

#include <vector>

namespace tally {

namespace {

// Kinds of sender, as bits of a set.
enum Sender : unsigned {
  kFromScheduler = 1,
  kFromServer = 2,
  kFromWorker = 4,
  kFromUnregistered = 8,  // id -1: a node that has no id yet (REGISTER)
};

unsigned KindOf(const NodeIds& ids, int id) {
  if (id == kSchedulerId) return kFromScheduler;
  if (ids.IsServer(id)) return kFromServer;
  if (ids.IsWorker(id)) return kFromWorker;
  if (id == -1) return kFromUnregistered;
  return 0;
}

// The senders a node of role `to` takes `command` from (0: none). The scheduler alone
// speaks for the job (its table, barriers, deaths, the end); workers make requests of
// servers, which answer them and replicate among themselves.
unsigned AllowedSenders(wire::Role to, wire::Command command) {
  const bool scheduler = to == wire::SCHEDULER, server = to == wire::SERVER;
  switch (command) {
    case wire::REGISTER:
      return scheduler ? kFromUnregistered : 0;
    case wire::NODE_TABLE:
    case wire::BARRIER_DONE:
    case wire::SHUTDOWN:
    case wire::NODE_DEAD:
    case wire::SERVER_LOST:
      return scheduler ? 0 : kFromScheduler;
    case wire::HEARTBEAT:
      return scheduler ? kFromServer | kFromWorker : kFromScheduler;
    case wire::BARRIER:
      return scheduler ? kFromServer | kFromWorker : 0;
    case wire::WORKER_DONE:
      return scheduler ? kFromWorker : 0;
    case wire::REPLICA_READY:
      return scheduler ? kFromServer : 0;
    case wire::LEAVE:
      return scheduler ? kFromWorker : 0;
    case wire::MEMBERSHIP_PREPARE:
      return server ? kFromScheduler : 0;
    case wire::MEMBERSHIP_REPORT:
      return scheduler ? kFromServer : 0;
    case wire::MEMBERSHIP:
      return scheduler ? 0 : kFromScheduler;
    case wire::ACK:  // the delivery layer's own, from any member
      return kFromScheduler | kFromServer | kFromWorker;
    case wire::INIT:
    case wire::PUSH:
    case wire::PULL:
    case wire::SET_OPTIMIZER:
    case wire::SET_LR:
    case wire::PUSHPULL:
    case wire::ROLLBACK:
      return server ? kFromWorker : 0;
    case wire::RESPONSE:  // a server's answer to a worker, or a backup's to its primary
      return scheduler ? 0 : kFromServer;
    case wire::REPLICATE:
    case wire::REPLICA_STATE:
      return server ? kFromServer : 0;
    case wire::LOSS_SCALE:  // the lead's alone: the joiner checks (CheckLossScaleTeller)
      return scheduler || server ? 0 : kFromWorker;
    default:
      return 0;
  }
}

std::string KindNames(unsigned kinds) {
  std::string out;
  const std::pair<unsigned, const char*> names[] = {
      {kFromScheduler, "the scheduler"}, {kFromServer, "a server"}, {kFromWorker, "a worker"},
      {kFromUnregistered, "a node without an id (-1)"}};
  for (const auto& [bit, name] : names) {
    if (kinds & bit) out += (out.empty() ? "" : " or ") + std::string(name);
  }
  return out;
}

std::string RoleName(wire::Role role) {
  return role == wire::SCHEDULER ? "the scheduler" : role == wire::SERVER ? "a server" : "a worker";
}

// MEMBERSHIP names the live workers (each once, at least one); MEMBERSHIP_PREPARE the one
// that leaves. Both of a step >= 0.
Status CheckMembershipFields(const NodeIds& ids, const wire::Meta& meta) {
  const std::string name = wire::Command_Name(meta.command());
  const bool prepare = meta.command() == wire::MEMBERSHIP_PREPARE;
  if (prepare ? meta.nodes_size() != 1 : meta.nodes_size() < 1 || meta.nodes_size() > ids.num_workers) {
    return Status::InvalidArgument(name + " naming " + std::to_string(meta.nodes_size()) + " workers");
  }
  if (!prepare && meta.step() < 0) return Status::InvalidArgument(name + " from step " + std::to_string(meta.step()));
  std::vector<bool> seen(ids.num_workers, false);
  for (const wire::Node& n : meta.nodes()) {
    if (n.role() != wire::WORKER || n.rank() < 0 || n.rank() >= ids.num_workers || seen[n.rank()]) {
      return Status::InvalidArgument(name + " naming rank " + std::to_string(n.rank()) +
                                     ", no worker of this job or named twice");
    }
    seen[n.rank()] = true;
  }
  return Status::Ok();
}

}  // namespace

std::string DescribeSender(const NodeIds& ids, int id) {
  std::string who = "no node of this job";
  if (id == kSchedulerId) who = "the scheduler";
  if (ids.IsServer(id)) who = "server " + std::to_string(ids.ServerRank(id));
  if (ids.IsWorker(id)) who = "worker " + std::to_string(ids.WorkerRank(id));
  if (id == -1) who = "no id yet";
  return "node " + std::to_string(id) + " (" + who + ")";
}

Status CheckCommandSender(const NodeIds& ids, wire::Role to, const wire::Meta& meta) {
  const wire::Command command = meta.command();
  const std::string name = wire::Command_IsValid(command) ? wire::Command_Name(command)
                                                          : "command " + std::to_string(command);
  const unsigned allowed = AllowedSenders(to, command);
  if (allowed & KindOf(ids, meta.sender_id())) return Status::Ok();
  return Status::InvalidArgument(name + " from " + DescribeSender(ids, meta.sender_id()) + " to " + RoleName(to) +
                                 ": " + (allowed ? "only " + KindNames(allowed) + " sends it" : "nobody sends it"));
}

Status CheckLossScaleTeller(const NodeIds& ids, int sender_id, int teller, int64_t step) {
  if (teller >= 0 && ids.IsWorker(sender_id) && ids.WorkerRank(sender_id) == teller) return Status::Ok();
  return Status::InvalidArgument("LOSS_SCALE for step " + std::to_string(step) + " from " +
                                 DescribeSender(ids, sender_id) + ": only the lead before that join, " +
                                 (teller >= 0 ? "worker " + std::to_string(teller) : std::string("nobody")) +
                                 ", sends it");
}

Status CheckNoticeFields(const NodeIds& ids, const wire::Meta& meta) {
  if (meta.command() == wire::NODE_TABLE && meta.nodes_size() != ids.size()) {
    return Status::InvalidArgument("NODE_TABLE of " + std::to_string(meta.nodes_size()) + " nodes; the job has " +
                                   std::to_string(ids.size()));
  }
  if (meta.command() == wire::MEMBERSHIP || meta.command() == wire::MEMBERSHIP_PREPARE) return CheckMembershipFields(ids, meta);
  if (meta.command() != wire::SERVER_LOST) return Status::Ok();
  if (meta.nodes_size() < 1 || meta.nodes_size() > 2) {
    return Status::InvalidArgument("SERVER_LOST naming " + std::to_string(meta.nodes_size()) + " nodes (1 or 2)");
  }
  const int lost = meta.nodes(0).rank();
  if (meta.nodes(0).role() != wire::SERVER || lost < 0 || lost >= ids.all_servers()) {
    return Status::InvalidArgument("SERVER_LOST of rank " + std::to_string(lost) + ", no server of this job");
  }
  if (meta.nodes_size() == 2) {
    const int spare = meta.nodes(1).rank();
    if (meta.nodes(1).role() != wire::SERVER || !ids.IsSpare(spare) || spare >= ids.all_servers()) {
      return Status::InvalidArgument("SERVER_LOST naming rank " + std::to_string(spare) + " as a spare, which it is not");
    }
  }
  return Status::Ok();
}

}  // namespace tally
