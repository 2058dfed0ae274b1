// A spare server taking a lost server's place (--spare-servers; server.h, docs/faults.md):
// the server of each chain the spare joins sends it every slice's whole state
// (REPLICA_STATE: values, momentum, the undo copy and the step bookkeeping), then an end
// marker, and from then on forwards its steps to it as to any backup. The messages to the
// spare leave in order (one priority), so a step forwarded after a slice's state is applied
// on top of it. The spare holds the workers' requests meanwhile, and tells the scheduler
// once every chain has come; from then on it counts as their holder.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "server/server.h"

namespace tally {

namespace {

// One frame of a slice's state: the slice named again for each (docs/wire.md).
void AddPart(Message* m, uint64_t key, uint64_t offset, const Tensor& data) {
  wire::KeySlice* ks = m->meta.add_slices();
  ks->set_key(key);
  ks->set_offset(offset);
  ks->set_length(static_cast<uint64_t>(data.numel()));
  m->data.push_back(data);
}

}  // namespace

void KVServer::SendStates() {
  if (core_.async()) return;
  for (int c = 0; c < chains_.size(); ++c) {
    const std::vector<int>& holders = chains_.Holders(c);
    if (holders.empty() || holders.front() != my_rank_) continue;
    for (size_t i = 1; i < holders.size(); ++i) {
      const int spare = holders[i];
      if (!ids_.IsSpare(spare) || !sent_states_.insert({c, spare}).second) continue;
      int sent = 0;
      for (const auto& [id, s] : core_.slices()) {
        if (Of(*s).chain != c) continue;
        Status st = send_(ids_.Server(spare), StateOf(*s));
        if (!st.ok()) LOG(WARNING) << "server: sending chain " << c << " to spare " << spare << ": " << st;
        ++sent;
      }
      Message end;
      end.meta.set_command(wire::REPLICA_STATE);
      end.meta.set_chain(c + 1);
      end.meta.set_priority(INT32_MAX);
      Status st = send_(ids_.Server(spare), std::move(end));
      if (!st.ok()) LOG(WARNING) << "server: sending chain " << c << " to spare " << spare << ": " << st;
      LOG(INFO) << "server: sent the " << sent << " slices of chain " << c << " to spare server " << spare;
    }
  }
}

void KVServer::ResendState(const ServerSlice& s) {
  const int chain = Of(s).chain;
  if (chain < 0 || sent_states_.empty()) return;
  for (int h : chains_.Holders(chain)) {
    if (!sent_states_.count({chain, h})) continue;
    Status st = send_(ids_.Server(h), StateOf(s));
    if (!st.ok()) LOG(WARNING) << "server: sending key " << s.key << " again to spare " << h << ": " << st;
  }
}

Message KVServer::StateOf(const ServerSlice& s) {
  const Recovery& r = Of(s);
  Updater* updater = core_.updater();
  Message m;
  m.meta.set_command(wire::REPLICA_STATE);
  m.meta.set_chain(r.chain + 1);
  m.meta.set_step(s.applied);
  m.meta.set_dtype(wire::F32);
  m.meta.set_priority(INT32_MAX);  // as REPLICATE: the steps forwarded later follow it
  // The values may go by reference: an update copies them first while a send holds them.
  AddPart(&m, s.key, s.offset, s.value);
  // Every slot of the optimizer's state (momentum; Adam's mean, var and step count; ...),
  // one part each, as the updater holds them: the spare continues bit for bit.
  const int slots = updater ? updater->state_slots() : 0;
  if (slots > 0) m.meta.set_optimizer_state(true);
  for (int j = 0; j < slots; ++j) AddPart(&m, s.key, s.offset, updater->StateSlot(s.id, s.value, j));
  const bool undo_state = slots == 0 || updater->SavedStateSlot(s.id, 0).defined();
  if (r.undo_step >= 0 && r.undo.defined() && undo_state) {
    m.meta.set_undo_step(r.undo_step + 1);
    AddPart(&m, s.key, s.offset, r.undo.Clone());  // BeforeUpdate may reuse the buffer before it leaves
    for (int j = 0; j < slots; ++j) AddPart(&m, s.key, s.offset, updater->SavedStateSlot(s.id, j));
  }
  m.meta.set_skipped_step(s.skipped + 1);
  for (int rank : s.nonfinite_ranks) m.meta.add_nonfinite_workers(rank);
  if (s.stop_from != INT64_MAX) m.meta.set_stop_from(s.stop_from + 1);
  for (int64_t step : r.skip_when_ready) m.meta.add_skip_steps(step);
  return m;
}

Status KVServer::HandleReplicaState(Message* msg) {
  const wire::Meta& m = msg->meta;
  const int chain = m.chain() - 1;
  if (chain < 0 || chain >= chains_.size() || !chains_.Holds(my_rank_, chain)) {
    return Status::InvalidArgument("REPLICA_STATE of chain " + std::to_string(chain) + ", not held here");
  }
  // Only the chain's serving server's state counts: one lost since may have sent some.
  // It may send a slice again (a rollback, or a new serving server): the last one holds.
  if (chains_.Holders(chain).front() != ids_.ServerRank(m.sender_id())) return Status::Ok();
  if (m.slices_size() == 0) {
    if (complete_chains_.count(chain)) return Status::Ok();
    complete_chains_.insert(chain);
    awaiting_chains_.erase(chain);
    if (!awaiting_chains_.empty()) return Status::Ok();
    LOG(INFO) << "server: holding every slice of chains taken over; " << held_.size() << " held requests go on";
    Message ready;
    ready.meta.set_command(wire::REPLICA_READY);
    Status st = send_(kSchedulerId, std::move(ready));
    if (!st.ok()) LOG(WARNING) << "server: telling the scheduler this spare is ready: " << st;
    std::deque<Message> held = std::move(held_);
    held_.clear();
    held_bytes_ = 0;
    for (Message& h : held) Handle(std::move(h));
    return Status::Ok();
  }
  return TakeState(*msg, chain);
}

Status KVServer::TakeState(const Message& msg, int chain) {
  const wire::Meta& m = msg.meta;
  Updater* updater = core_.updater();
  const bool has_mom = m.optimizer_state(), has_undo = m.undo_step() > 0;
  if (has_mom && !updater) return Status::InvalidArgument("optimizer state without an optimizer");
  // The state's slots follow the values, and the undo copy's the undo copy.
  const int slots = has_mom ? updater->state_slots() : 0;
  const int parts = 1 + slots + (has_undo ? 1 + slots : 0);
  if (m.slices_size() != parts) {
    return Status::InvalidArgument(std::to_string(m.slices_size()) + " parts for " + std::to_string(parts));
  }
  const wire::KeySlice& ks = m.slices(0);
  for (const wire::KeySlice& part : m.slices()) {
    if (part.key() != ks.key() || part.offset() != ks.offset() || part.length() != ks.length()) {
      return Status::InvalidArgument("REPLICA_STATE parts of different slices (key " + std::to_string(part.key()) +
                                     " [" + std::to_string(part.offset()) + ", +" + std::to_string(part.length()) +
                                     ") beside key " + std::to_string(ks.key()) + ")");
    }
  }
  ServerSlice* s = core_.Slot(ks.key(), ks.offset());
  const int id = s->id;
  *s = ServerSlice();  // the last state sent holds, whatever came before it
  s->id = id;
  s->key = ks.key();
  s->offset = ks.offset();
  s->length = static_cast<int64_t>(ks.length());
  s->pushes = SliceAggregator(ids_.num_workers, s->length, Members());
  if (recovery_.size() <= static_cast<size_t>(s->id)) recovery_.resize(s->id + 1);
  Recovery& r = Of(*s);
  r = Recovery();
  r.chain = chain;
  s->value = msg.data[0].Clone();  // the frame may be the sender's own buffer (in-process)
  s->applied = m.step();
  s->skipped = m.skipped_step() - 1;
  s->nonfinite_ranks.assign(m.nonfinite_workers().begin(), m.nonfinite_workers().end());
  s->stop_from = m.stop_from() > 0 ? m.stop_from() - 1 : INT64_MAX;
  r.skip_when_ready.insert(m.skip_steps().begin(), m.skip_steps().end());
  if (has_undo) {
    // The optimizer keeps its undo copy itself: put the undone state in, save it, and then
    // the current one.
    const Tensor& undo = msg.data[1 + slots];
    r.undo = undo.Clone();
    r.undo_step = m.undo_step() - 1;
    if (slots > 0) {
      for (int j = 0; j < slots; ++j) {
        TALLY_RETURN_IF_ERROR(updater->SetStateSlot(s->id, r.undo, j, msg.data[2 + slots + j]));
      }
      updater->SaveState(s->id, r.undo);
    }
  }
  for (int j = 0; j < slots; ++j) TALLY_RETURN_IF_ERROR(updater->SetStateSlot(s->id, s->value, j, msg.data[1 + j]));
  core_.MarkPushed();
  return Status::Ok();
}

bool KVServer::EarlyForSpare(Message* msg) {
  if (!ids_.IsSpare(my_rank_) || !chains_.ChainsOf(my_rank_).empty()) return false;
  early_.push_back(std::move(*msg));
  return true;
}

void KVServer::TakePlace(int lost) {
  for (int c : chains_.ChainsOf(my_rank_)) {
    if (!complete_chains_.count(c)) awaiting_chains_.insert(c);
  }
  LOG(INFO) << "server: taking the place of server " << lost << ": awaiting the state of "
            << awaiting_chains_.size() << " chains";
  std::deque<Message> early = std::move(early_);
  early_.clear();
  for (Message& m : early) Handle(std::move(m));
}

bool KVServer::HoldForState(Message* msg) {
  if (awaiting_chains_.empty()) return false;
  switch (msg->meta.command()) {
    case wire::PUSH:
    case wire::PULL:
    case wire::PUSHPULL:
    case wire::ROLLBACK:
      break;
    default:
      return false;
  }
  // Workers send a spare only their ROLLBACKs (it serves no chain before it is ready), a
  // few per slice: what is held is bounded, whatever a worker sends meanwhile.
  const size_t bytes = DataBytes(*msg);
  if (held_.size() >= kMaxHeld || held_bytes_ + bytes > kMaxHeldBytes) {
    core_.CountRefused();
    LOG_EVERY_N(WARNING, 100) << "server: refused " << wire::Command_Name(msg->meta.command()) << " from node "
                              << msg->meta.sender_id() << ": already holding " << held_.size() << " requests ("
                              << held_bytes_ << " bytes) until this spare has its chains";
    core_.Respond(msg->meta, "server " + std::to_string(my_rank_) + ": spare still receiving its chains, holding " +
                           std::to_string(held_.size()) + " requests already");
    return true;
  }
  held_bytes_ += bytes;
  held_.push_back(std::move(*msg));
  return true;
}

}  // namespace tally
