// KVServer's replication of synchronous steps along a slice's chain of servers
// (--server-replicas; server.h, docs/faults.md): the primary forwards each applied step's
// fp32 sum, a backup applies it as the primary did, and the step's answers wait until every
// live backup has.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "server/server.h"

namespace tally {

void KVServer::SetReplication(int my_rank, int replicas) {
  my_rank_ = my_rank;
  replicas_ = replicas;
  chains_ = ServerChains(ids_.num_servers, replicas);
}

std::vector<int> KVServer::Backups(const ServerSlice& s) const {
  const int chain = Of(s).chain;
  if (replicas_ == 0 || chain < 0 || core_.async()) return {};
  const std::vector<int>& holders = chains_.Holders(chain);
  if (holders.empty() || holders.front() != my_rank_) return {};
  return std::vector<int>(holders.begin() + 1, holders.end());
}

int64_t KVServer::Visible(const ServerSlice& s) const {
  const Recovery& r = Of(s);
  return r.owed.empty() ? s.applied : r.owed.begin()->first - 1;
}

void KVServer::StepDone(ServerSlice* s, int64_t step, const Tensor& sum, float scale) {
  Forward(s, step, sum, scale);  // to the backups
}

void KVServer::Forward(ServerSlice* s, int64_t step, const Tensor& sum, float scale, float lr) {
  const std::vector<int> backups = Backups(*s);
  if (backups.empty()) return;
  for (int r : backups) {
    Message m;
    m.meta.set_command(wire::REPLICATE);
    m.meta.set_step(step);
    m.meta.set_dtype(wire::F32);
    m.meta.set_grad_scale(scale);
    // The backup's own SET_LR of this step travels on another path and may come later.
    m.meta.set_lr(lr >= 0 ? lr : core_.LearningRate(step));
    m.meta.set_priority(INT32_MAX);  // ahead of answers: the answers of this step wait for it
    wire::KeySlice* ks = m.meta.add_slices();
    ks->set_key(s->key);
    ks->set_offset(s->offset);
    ks->set_length(static_cast<uint64_t>(s->length));
    if (s->skipped == step) {
      m.meta.set_skipped(true);
      for (int rank : s->nonfinite_ranks) m.meta.add_nonfinite_workers(rank);
    }
    // Skipped steps carry the values as a placeholder: the backup applies nothing then.
    m.data.push_back(sum.defined() ? sum : s->value);
    Of(*s).owed[step].insert(r);
    Status st = send_(ids_.Server(r), std::move(m));
    if (!st.ok()) LOG(WARNING) << "server: replicating step " << step << " to server " << r << " failed: " << st;
  }
}

Status KVServer::HandleReplicate(Message* msg) {
  const wire::Meta& m = msg->meta;
  const int64_t step = m.step();
  std::vector<ServerSlice*> slices;
  TALLY_RETURN_IF_ERROR(core_.FindSlices(*msg, &slices));
  for (ServerSlice* s : slices) {
    if (step > s->applied + 1) {
      return Status::InvalidArgument("REPLICATE of step " + std::to_string(step) + " of key " +
                                     std::to_string(s->key) + ", which has applied step " + std::to_string(s->applied));
    }
  }
  // Acknowledged on receipt, before the update: once here the step is safe from the
  // primary's death (this server applies what it received, in order), and the primary's
  // answers need not wait for this server's update too.
  Message ack;
  ack.meta.set_command(wire::RESPONSE);
  ack.meta.set_receiver_id(m.sender_id());
  ack.meta.set_request_id(m.request_id());
  ack.meta.set_step(step);
  ack.meta.set_priority(INT32_MAX);
  *ack.meta.mutable_slices() = m.slices();
  Status st = send_(m.sender_id(), std::move(ack));
  if (!st.ok()) LOG(WARNING) << "server: acknowledging step " << step << " to node " << m.sender_id() << ": " << st;
  std::vector<Tensor> data = std::move(msg->data);
  const float scale = m.grad_scale() == 0.0f ? 1.0f : m.grad_scale();
  for (size_t i = 0; i < slices.size(); ++i) {
    ServerSlice* s = slices[i];
    if (step <= s->applied) continue;  // a repeat: already applied
    // A step some worker rolled back here before its sum came (the ROLLBACK every worker
    // sends each replica) is skipped, as the primary did.
    Tensor sum;
    if (m.skipped() || Of(*s).skip_when_ready.erase(step) > 0) {
      core_.Skip(s, step, std::vector<int>(m.nonfinite_workers().begin(), m.nonfinite_workers().end()));
    } else {
      sum = data[i].To(DType::kF32);
      core_.Apply(s, {sum}, step, scale, m.lr());
    }
    s->applied = step;
    core_.MarkPushed();
    // A step of a primary lost since it sent it, arriving here after this server took the
    // chain over: its backups (a spare among them) must have it too.
    Forward(s, step, sum, scale, m.lr());
  }
  return Status::Ok();
}

void KVServer::HandleReplicaAck(const Message& msg) {
  const int from = ids_.ServerRank(msg.meta.sender_id());
  for (const wire::KeySlice& ks : msg.meta.slices()) {
    ServerSlice* s = core_.Find(ks.key(), ks.offset());
    if (s == nullptr) continue;
    std::map<int64_t, std::set<int>>& owed_steps = Of(*s).owed;
    auto owed = owed_steps.find(msg.meta.step());
    if (owed == owed_steps.end()) continue;
    owed->second.erase(from);
    if (owed->second.empty()) owed_steps.erase(owed);
    core_.AnswerVisible(s);
  }
}

void KVServer::ServerLost(int rank, int spare) {
  if (chains_.Lost(rank)) return;
  // Under dist_async each holder applies the workers' own copies as they come: a spare
  // given a snapshot would miss those in flight, so it takes no place (docs/faults.md).
  if (core_.async() && spare >= 0) {
    if (spare == my_rank_) LOG(WARNING) << "server: dist_async: a spare takes no lost server's place";
    spare = -1;
  }
  chains_.Lose(rank, spare);
  for (const auto& [id, s] : core_.slices()) {
    std::map<int64_t, std::set<int>>& owed = Of(*s).owed;
    for (auto it = owed.begin(); it != owed.end();) {
      it->second.erase(rank);
      it = it->second.empty() ? owed.erase(it) : std::next(it);
    }
    core_.AnswerVisible(s.get());
  }
  SendStates();
  if (spare >= 0 && spare == my_rank_) TakePlace(rank);
}

}  // namespace tally
