// KVServer: the layer of fault tolerance around the server's core (server.h): it takes the
// peers' messages itself and hands the workers' requests to the core (server_core.h).
#include <cstdint>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "net/command_rules.h"
#include "profile/trace.h"
#include "server/server.h"

namespace tally {

KVServer::KVServer(int num_servers, int num_workers, SendFn send, int spare_servers)
    : ids_{num_servers, num_workers, spare_servers}, send_(send), core_(ids_, std::move(send), this) {}

KVServer::~KVServer() = default;

void KVServer::SetStepRecorder(std::function<void(const profile::StepRecord&)> recorder,
                               std::function<void(int64_t step)> step_begins) {
  core_.SetStepRecorder(std::move(recorder), std::move(step_begins));
}

void KVServer::Handle(Message&& msg) {
  const wire::Meta& m = msg.meta;
  profile::TraceScope trace(wire::Command_Name(m.command()).c_str(), "server");
  core_.NoteRequest(msg);
  if (HandleFromPeers(&msg)) return;
  if (DroppedForTest(m)) return;  // kv_server_elastic.cc
  if (HoldForState(&msg)) return;  // kv_server_spare.cc
  if (m.command() == wire::ROLLBACK) return HandleRequest(&msg);
  core_.Handle(std::move(msg));
}

void KVServer::HandleRequest(Message* msg) {
  // Only the step being gathered, or the last one applied, can be rolled back.
  Status s = core_.AdmitRequest(*msg, /*window=*/1);
  if (s.ok()) s = HandleRollback(*msg);  // kv_server_rollback.cc
  if (!s.ok()) core_.Refuse(msg->meta, s);
}

bool KVServer::HandleFromPeers(Message* msg) {
  const wire::Meta& m = msg->meta;
  const std::string what = wire::Command_Name(m.command()) + " from node " + std::to_string(m.sender_id());
  if (m.command() == wire::MEMBERSHIP_PREPARE || m.command() == wire::MEMBERSHIP) {
    HandleMembership(*msg);  // kv_server_elastic.cc
    return true;
  }
  if (m.command() == wire::SERVER_LOST) {
    Status r = CheckCommandSender(ids_, wire::SERVER, m);
    if (r.ok()) r = CheckNoticeFields(ids_, m);
    if (r.ok()) {
      ServerLost(m.nodes(0).rank(), m.nodes_size() > 1 ? m.nodes(1).rank() : -1);
    } else {
      core_.CountRefused();
      LOG(WARNING) << "server: refused " << r.message();
    }
    return true;
  }
  if (m.command() == wire::RESPONSE) {
    if (ids_.IsServer(m.sender_id())) {
      HandleReplicaAck(*msg);  // a backup has applied a step this server forwarded
    } else {
      core_.CountRefused();
      LOG(WARNING) << "server: ignoring " << what << ": a server sends no requests to it";
    }
    return true;
  }
  if (m.command() == wire::REPLICATE || m.command() == wire::REPLICA_STATE) {
    Status r = ValidateMessage(*msg);
    if (r.ok() && !ids_.IsServer(m.sender_id())) r = Status::InvalidArgument("the sender is not a server of this job");
    if (r.ok() && EarlyForSpare(msg)) return true;
    if (r.ok()) r = m.command() == wire::REPLICATE ? HandleReplicate(msg) : HandleReplicaState(msg);
    if (!r.ok()) {
      core_.CountRefused();
      LOG(WARNING) << "server: refused " << what << ": " << r.message();
    }
    return true;
  }
  return false;
}

Status KVServer::AdmitInit(const wire::Meta& init) const {
  const int chain = init.chain();
  if (replicas_ == 0) {
    if (chain == 0) return Status::Ok();
    return Status::InvalidArgument("chain " + std::to_string(chain) + ", but this job keeps no replicas");
  }
  if (chain < 1 || chain > chains_.size() || !chains_.Holds(my_rank_, chain - 1)) {
    return Status::InvalidArgument("chain " + std::to_string(chain) + " is not one this server holds (chains 1.." +
                                   std::to_string(chains_.size()) + ", --server-replicas " + std::to_string(replicas_) +
                                   ")");
  }
  return Status::Ok();
}

void KVServer::SliceMade(const ServerSlice& s, const wire::Meta& init) {
  if (recovery_.size() <= static_cast<size_t>(s.id)) recovery_.resize(s.id + 1);
  Of(s).chain = init.chain() - 1;
}

Tensor KVServer::Value(uint64_t key, uint64_t offset) const {
  const ServerSlice* s = core_.Find(key, offset);
  return s == nullptr ? Tensor() : s->value;
}

int64_t KVServer::AppliedStep(uint64_t key, uint64_t offset) const {
  const ServerSlice* s = core_.Find(key, offset);
  return s == nullptr ? -1 : s->applied;
}

}  // namespace tally
