// ServerCore: a worker's data commands, from admission to the answer (server_core.h).
// Applying a step: server_core_step.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "compress/compress.h"
#include "net/command_rules.h"
#include "optim/reduce.h"
#include "profile/trace.h"
#include "server/server_core.h"

namespace tally {

namespace {

std::string SliceName(const wire::KeySlice& s) {
  return "key " + std::to_string(s.key()) + " [" + std::to_string(s.offset()) + ", +" +
         std::to_string(s.length()) + ")";
}

OptimizerConfig FromWireOptimizer(const wire::OptimizerConfig& w) {
  OptimizerConfig c;
  c.type = w.type();
  c.lr = w.lr();
  c.momentum = w.momentum();
  c.wd = w.wd();
  c.rescale_grad = w.rescale_grad();
  c.clip_gradient = w.clip_gradient();
  c.multi_precision = w.multi_precision();
  c.no_wd_keys.insert(w.no_wd_keys().begin(), w.no_wd_keys().end());
  if (w.has_beta1()) c.beta1 = w.beta1();
  if (w.has_beta2()) c.beta2 = w.beta2();
  if (w.has_epsilon()) c.epsilon = w.epsilon();
  if (w.has_gamma1()) c.gamma1 = w.gamma1();
  if (w.has_gamma2()) c.gamma2 = w.gamma2();
  c.centered = w.centered();
  if (w.has_clip_weights()) c.clip_weights = w.clip_weights();
  if (w.has_eta()) c.eta = w.eta();
  c.momentum_correction = !w.no_momentum_correction();
  c.wd_lh = w.wd_lh();
  if (w.has_lower_bound()) c.lower_bound = w.lower_bound();
  if (w.has_upper_bound()) c.upper_bound = w.upper_bound();
  c.bias_correction = !w.no_bias_correction();
  c.lazy_update = !w.no_lazy_update();
  return c;
}

// Moves the data frames out of msg. A frame whose storage is referenced from outside the
// message (the in-process transport shares the sender's buffer) is copied, since the
// sender may write its buffer again once the push is answered.
std::vector<Tensor> TakeData(Message* msg) {
  std::vector<Tensor> data = std::move(msg->data);
  msg->data.clear();
  std::map<const Storage*, long> refs_here;
  for (const Tensor& t : data) ++refs_here[t.storage().get()];
  for (Tensor& t : data) {
    if (t.storage().use_count() > refs_here[t.storage().get()]) t = t.Clone();
  }
  return data;
}

// The compression a push's packed bits were made with (dtype TWO_BIT or ONE_BIT), from its
// Meta; a 2bit threshold that is no positive number is refused.
Status PushCompression(const wire::Meta& m, CompressionConfig* out) {
  const bool two_bit = m.dtype() == wire::TWO_BIT;
  Status s = ParseCompression(two_bit ? "2bit" : "1bit", two_bit ? m.gc_threshold() : 0.0f, out);
  if (!s.ok()) return Status::InvalidArgument("gc_threshold: " + s.message());
  return Status::Ok();
}

// A compressed push's frames as the fp32 gradients they stand for: MXNet's servers
// dequantise each push and sum the results as they would uncompressed ones.
void Dequantize(const CompressionConfig& gc, const wire::Meta& m, std::vector<Tensor>* data) {
  for (size_t i = 0; i < data->size(); ++i) {
    const int64_t n = static_cast<int64_t>(m.slices(static_cast<int>(i)).length());
    Tensor values = Tensor::Empty({n}, DType::kF32);
    Dequantize(gc, (*data)[i].data<uint8_t>(), n, values.data<float>());
    (*data)[i] = std::move(values);
  }
}

}  // namespace

ServerCore::ServerCore(NodeIds ids, SendFn send, CoreHooks* hooks)
    : ids_(ids), send_(std::move(send)), hooks_(hooks != nullptr ? hooks : &plain_) {
  CHECK_GE(ids_.num_servers, 1);
  CHECK_GE(ids_.num_workers, 1);
}

void ServerCore::Respond(const wire::Meta& request, const std::string& error, bool not_applied) {
  Message r;
  r.meta.set_command(wire::RESPONSE);
  r.meta.set_receiver_id(request.sender_id());
  r.meta.set_request_id(request.request_id());
  r.meta.set_priority(request.priority());
  r.meta.set_step(request.step());
  if (!error.empty()) r.meta.set_error(error);
  if (not_applied) {
    r.meta.set_skipped(true);
    r.meta.add_nonfinite_workers(ids_.WorkerRank(request.sender_id()));
  }
  Status s = send_(request.sender_id(), std::move(r));
  if (!s.ok()) LOG(WARNING) << "server: answer to node " << request.sender_id() << " failed: " << s;
}

Status ServerCore::AdmitRequest(const Message& msg, int64_t window) {
  const wire::Meta& m = msg.meta;
  Status s = ValidateMessage(msg);
  if (s.ok() && !ids_.IsWorker(m.sender_id())) {
    s = Status::InvalidArgument("the sender is not a worker of this job");
  }
  if (s.ok() && window > 0) s = AdmitStep(msg, window);
  return s;
}

void ServerCore::Refuse(const wire::Meta& m, const Status& why) {
  const std::string what = wire::Command_Name(m.command()) + " from node " + std::to_string(m.sender_id());
  ++refused_;
  if (LogsRefusal(refused_)) {
    LOG(WARNING) << "server: refused " << what << ": " << why.message() << " (" << refused_ << " refused so far)";
  }
  Respond(m, "server " + std::to_string(ids_.ServerRank(m.receiver_id())) + ": " + what + ": " + why.message());
}

// INIT, SET_OPTIMIZER and SET_LR are worker 0's. Under --elastic worker 0 may leave, so every
// live worker sends SET_LR (the same rate), taken from a worker live at its step (docs/wire.md).
Status ServerCore::CheckLeadCommand(const wire::Meta& m) const {
  const WorkerMembership* members = hooks_->Members();
  if (m.command() == wire::SET_LR && members != nullptr) {
    const int id = m.sender_id();
    if (ids_.IsWorker(id) && members->Live(ids_.WorkerRank(id), std::max<int64_t>(m.step(), 0))) return Status::Ok();
    return Status::InvalidArgument("only a worker live at its step sends SET_LR (--elastic)");
  }
  if (m.sender_id() == ids_.Worker(0)) return Status::Ok();
  return Status::InvalidArgument("only worker 0 sends " + wire::Command_Name(m.command()));
}

void ServerCore::Handle(Message&& msg) {
  const wire::Meta& m = msg.meta;
  const bool of_step = m.command() == wire::PUSH || m.command() == wire::PULL || m.command() == wire::PUSHPULL;
  Status s = AdmitRequest(msg, of_step ? kStepWindow : 0);
  if (s.ok()) {
    switch (m.command()) {
      case wire::SET_OPTIMIZER:
      case wire::INIT:
      case wire::SET_LR:
        s = CheckLeadCommand(m);
        if (s.ok() && m.command() == wire::SET_OPTIMIZER) {
          s = HandleSetOptimizer(msg);
        } else if (s.ok() && m.command() == wire::INIT) {
          s = HandleInit(msg);
        } else if (s.ok()) {
          s = HandleSetLr(msg);
        }
        if (s.ok()) Respond(m, "");
        break;
      case wire::PUSH: {
        PushOutcome pushed;
        s = HandlePush(&msg, &pushed);
        break;
      }
      case wire::PULL:
        s = HandlePull(msg);
        break;
      case wire::PUSHPULL: {
        // A PUSH that is answered as the PULL of its own step: one round trip instead of
        // two. The pull's checks are the push's (ValidateMessage checked pull_dtype), so
        // once the push is taken the pull cannot be refused.
        PushOutcome pushed;
        s = HandlePush(&msg, &pushed);
        if (s.ok() && !pushed.answered_before) s = HandlePull(msg, pushed.not_applied);
        break;
      }
      default:
        s = Status::InvalidArgument("not a data command");
    }
  }
  if (!s.ok()) Refuse(m, s);
}

Status ServerCore::HandleSetOptimizer(const Message& msg) {
  const wire::Meta& m = msg.meta;
  if (pushed_) return Status::InvalidArgument("the optimizer cannot change after the first push");
  if (m.num_workers() != ids_.num_workers) {
    return Status::InvalidArgument("num_workers " + std::to_string(m.num_workers()) +
                                   ", but the job has " + std::to_string(ids_.num_workers));
  }
  OptimizerConfig c = FromWireOptimizer(m.optimizer());
  TALLY_RETURN_IF_ERROR(ValidateOptimizerConfig(c));
  if (!c.no_wd_keys.empty() && *c.no_wd_keys.begin() < 0) {
    return Status::InvalidArgument("no_wd_keys holds key " + std::to_string(*c.no_wd_keys.begin()));
  }
  updater_ = std::make_unique<Updater>(c);
  updater_->set_spread_over_pool(true);  // RunServer runs OpenMP on one thread
  optimizer_ = c;
  lr_.Reset(c.lr);
  async_ = m.async();
  LOG(INFO) << "server: optimizer " << c.type << " lr " << c.lr << " momentum " << c.momentum
            << " wd " << c.wd << (async_ ? ", async" : ", sync") << " over " << ids_.num_workers << " workers";
  return Status::Ok();
}

Status ServerCore::HandleInit(const Message& msg) {
  const wire::Meta& m = msg.meta;
  TALLY_RETURN_IF_ERROR(hooks_->AdmitInit(m));
  if (m.num_workers() != ids_.num_workers) {
    return Status::InvalidArgument("num_workers " + std::to_string(m.num_workers()) +
                                   ", but the job has " + std::to_string(ids_.num_workers));
  }
  if (pushed_) return Status::InvalidArgument("INIT after the first push");
  if (m.optimizer_state()) return HandleInitState(msg);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (const wire::KeySlice& ks : m.slices()) {
    auto id = std::make_pair(ks.key(), ks.offset());
    if (slices_.count(id) || !seen.insert(id).second) {
      return Status::InvalidArgument(SliceName(ks) + " is initialised twice");
    }
  }
  async_ = m.async();
  for (int i = 0; i < m.slices_size(); ++i) {
    const wire::KeySlice& ks = m.slices(i);
    auto s = std::make_unique<ServerSlice>();
    s->id = static_cast<int>(slices_.size());
    s->key = ks.key();
    s->offset = ks.offset();
    s->length = static_cast<int64_t>(ks.length());
    s->value = msg.data[i].To(DType::kF32);  // always a copy: the frame may be the sender's buffer
    s->pushes = SliceAggregator(ids_.num_workers, s->length, hooks_->Members());
    hooks_->SliceMade(*s, m);
    slices_[{ks.key(), ks.offset()}] = std::move(s);
  }
  return Status::Ok();
}

Status ServerCore::HandleInitState(const Message& msg) {
  std::vector<ServerSlice*> slices;
  TALLY_RETURN_IF_ERROR(FindSlices(msg, &slices));
  if (!updater_) return Status::InvalidArgument("optimizer state without an optimizer");
  const int slots = updater_->state_slots(), slot = msg.meta.state_slot();
  if (slots == 0) {
    return Status::InvalidArgument("optimizer state, but --optimizer " + updater_->config().type + " keeps none here");
  }
  if (slot < 0 || slot >= slots) {
    return Status::InvalidArgument("state_slot " + std::to_string(slot) + ", but the optimizer keeps slots 0.." +
                                   std::to_string(slots - 1));
  }
  // Every slice is checked before any is set: a refused INIT changes nothing.
  for (size_t i = 0; i < slices.size(); ++i) {
    TALLY_RETURN_IF_ERROR(updater_->CheckStateSlot(slices[i]->id, slices[i]->length, slot, msg.data[i]));
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    TALLY_RETURN_IF_ERROR(updater_->SetStateSlot(slices[i]->id, slices[i]->value, slot, msg.data[i]));
  }
  return Status::Ok();
}

Status ServerCore::AdmitStep(const Message& msg, int64_t window) {
  const wire::Meta& m = msg.meta;
  TALLY_RETURN_IF_ERROR(hooks_->AdmitPush(msg));
  std::vector<ServerSlice*> slices;
  TALLY_RETURN_IF_ERROR(FindSlices(msg, &slices));
  for (const ServerSlice* s : slices) {
    const int64_t last = async_ ? std::max(s->applied, s->newest) : s->applied;
    const std::string name = "key " + std::to_string(s->key) + " [" + std::to_string(s->offset) + ", +" +
                             std::to_string(s->length) + ")";
    if (m.step() > last + window) {
      return Status::InvalidArgument("step " + std::to_string(m.step()) + " of " + name + " is more than " +
                                     std::to_string(window) + " after its last step " +
                                     (async_ ? "taken, " : "applied, ") + std::to_string(last) +
                                     " (docs/wire.md, \"Steps\")");
    }
    // A request that would wait for a step (HandlePull; a PUSH held back, HandlePush).
    const int64_t wait_for =
        m.command() != wire::PUSH || hooks_->AnswerPushOnceVisible() ? m.step() : m.step() - kAnsweredAhead;
    if (async_ || hooks_->Visible(*s) >= wait_for) continue;
    int waiting = 0;
    for (const auto& w : s->waiting) waiting += w->request.sender_id() == m.sender_id();
    if (waiting >= kMaxWaitingPerWorker) {
      return Status::InvalidArgument(std::to_string(waiting) + " requests of this worker already wait on " + name);
    }
  }
  return Status::Ok();
}

Status ServerCore::FindSlices(const Message& msg, std::vector<ServerSlice*>* out) {
  out->clear();
  for (const wire::KeySlice& ks : msg.meta.slices()) {
    auto it = slices_.find({ks.key(), ks.offset()});
    if (it == slices_.end()) return Status::InvalidArgument(SliceName(ks) + " is not held here");
    if (static_cast<int64_t>(ks.length()) != it->second->length) {
      return Status::InvalidArgument(SliceName(ks) + " has " + std::to_string(it->second->length) +
                                     " elements here");
    }
    out->push_back(it->second.get());
  }
  return Status::Ok();
}

void ServerCore::NoteDuplicate(const wire::Meta& m, uint64_t key, int rank) {
  ++duplicates_;
  LOG_EVERY_N(WARNING, 1000) << "server: a duplicate " << wire::Command_Name(m.command()) << " of step " << m.step()
                             << " of key " << key << " from worker " << rank << " is not counted again ("
                             << google::COUNTER << " so far)";
}

Status ServerCore::HandlePush(Message* msg, PushOutcome* out) {
  const wire::Meta& m = msg->meta;
  const int rank = ids_.WorkerRank(m.sender_id());
  const int64_t step = m.step();
  if (step < 0) return Status::InvalidArgument("step " + std::to_string(step) + " is negative");
  const float scale = m.grad_scale() == 0.0f ? 1.0f : m.grad_scale();
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    return Status::InvalidArgument("grad_scale " + std::to_string(m.grad_scale()) + " is not a positive number");
  }
  CompressionConfig gc;
  if (IsPackedWireDType(m.dtype())) TALLY_RETURN_IF_ERROR(PushCompression(m, &gc));
  std::vector<ServerSlice*> slices;
  TALLY_RETURN_IF_ERROR(FindSlices(*msg, &slices));
  std::set<ServerSlice*> distinct(slices.begin(), slices.end());
  if (distinct.size() != slices.size()) return Status::InvalidArgument("a slice appears twice");
  // A worker's push of a step counts once per slice: one already counted (waiting for the
  // other workers', or applied) is a duplicate, answered as the first was and not counted
  // again (docs/wire.md, "Duplicates").
  std::vector<bool> counted(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    ServerSlice* s = slices[i];
    counted[i] = s->pushes.Counted(async_, step, rank, s->applied);
    if (async_) continue;
    // The answer to its pull went out when step `step` was applied, and a later step has
    // changed the values since: answering again would send other values than the first time.
    if (step < s->applied) out->answered_before = true;
  }
  // Answer before applying: the worker may reuse its buffer (any frame still shared with
  // it is copied by TakeData first). A PUSHPULL is answered by its pull instead. Under
  // dist_async a push that is not finite is not applied, and its answer says so.
  std::vector<Tensor> data = TakeData(msg);
  if (gc.enabled()) Dequantize(gc, m, &data);
  std::vector<bool> finite(slices.size(), true);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (async_ && !counted[i]) finite[i] = AllFinite(data[i]);
    out->not_applied |= !finite[i];
  }
  // A synchronous PUSH far ahead of a slice is answered once the slice has caught up to
  // kAnsweredAhead steps behind it, so that a worker waiting for its answers stays inside
  // the step window (AdmitStep); a layer may have every one answered once its step is
  // visible (the replicated server's: an answered push is never lost with this server).
  bool defer = m.command() == wire::PUSH && !async_ && hooks_->AnswerPushOnceVisible();
  for (ServerSlice* s : slices) {
    defer |= m.command() == wire::PUSH && !async_ && hooks_->Visible(*s) < step - kAnsweredAhead;
  }
  if (m.command() == wire::PUSH && !defer) Respond(m, "", out->not_applied);
  pushed_ = true;
  for (size_t i = 0; i < slices.size(); ++i) {
    ServerSlice* s = slices[i];
    if (counted[i]) {
      NoteDuplicate(m, s->key, rank);
      continue;
    }
    TakePush(s, m, std::move(data[i]), scale, finite[i]);
  }
  if (defer) return HandlePull(*msg, false, /*push_only=*/true);
  return Status::Ok();
}

void ServerCore::TakePush(ServerSlice* s, const wire::Meta& m, Tensor grad, float scale, bool finite) {
  const int rank = ids_.WorkerRank(m.sender_id());
  const int64_t step = m.step();
  if (m.stop()) s->stop_from = std::min(s->stop_from, step);
  if (async_) {
    s->pushes.NoteAsync(step, rank);
    s->newest = std::max(s->newest, step);
    if (!finite) {
      LogSkip(step, rank, "worker " + std::to_string(rank) + "'s push of key " + std::to_string(s->key) +
                              " is not finite: not applied (dist_async)");
      return;
    }
    Apply(s, {grad}, step, scale);
    s->applied = std::max(s->applied, step);
    return;
  }
  const float step_scale = s->pushes.AddSync(step, rank, std::move(grad), scale);
  if (step_scale != scale) {
    LOG_EVERY_N(ERROR, 100) << "server: worker " << rank << " pushed step " << step << " of key " << s->key
                            << " with gradient scale " << scale << ", another worker with " << step_scale
                            << "; the first is used";
  }
  ApplyReadySteps(s);
}

Status ServerCore::HandlePull(const Message& msg, bool push_not_applied, bool push_only) {
  const wire::Meta& m = msg.meta;
  if (m.step() < -1) return Status::InvalidArgument("step " + std::to_string(m.step()) + " is below -1");
  if (!wire::DType_IsValid(m.pull_dtype())) {
    return Status::InvalidArgument("pull_dtype " + std::to_string(m.pull_dtype()) + " is unknown");
  }
  auto p = std::make_shared<PendingPull>();
  TALLY_RETURN_IF_ERROR(FindSlices(msg, &p->slices));
  p->request = m;
  p->step = push_only && !hooks_->AnswerPushOnceVisible() ? m.step() - kAnsweredAhead : m.step();
  p->push_not_applied = push_not_applied;
  p->push_only = push_only;
  // A duplicate of a request still waiting: the first one's answer will do for both.
  for (ServerSlice* s : p->slices) {
    for (const auto& w : s->waiting) {
      if (w->request.sender_id() == m.sender_id() && w->request.request_id() == m.request_id()) return Status::Ok();
    }
  }
  if (!async_) {
    for (ServerSlice* s : p->slices) {
      if (hooks_->Visible(*s) < p->step) {
        s->waiting.push_back(p);
        ++p->remaining;
      }
    }
  }
  if (p->remaining == 0) {
    AnswerPull(*p);
  } else {
    ++num_waiting_;
  }
  return Status::Ok();
}

void ServerCore::AnswerPull(const PendingPull& p) {
  if (p.push_only) {
    Respond(p.request, "");
    return;
  }
  Message r;
  r.meta.set_command(wire::RESPONSE);
  r.meta.set_receiver_id(p.request.sender_id());
  r.meta.set_request_id(p.request.request_id());
  r.meta.set_priority(p.request.priority());  // the order answers leave in (RunServer)
  r.meta.set_step(p.request.step());
  r.meta.set_dtype(p.request.pull_dtype());
  *r.meta.mutable_slices() = p.request.slices();
  const DType dtype = FromWire(p.request.pull_dtype());
  bool stop = false;
  std::set<int> nonfinite;
  if (p.push_not_applied) nonfinite.insert(ids_.WorkerRank(p.request.sender_id()));
  bool skipped = p.push_not_applied;
  for (ServerSlice* s : p.slices) {
    stop |= async_ ? s->stop_from != INT64_MAX : s->stop_from <= p.request.step();
    if (!async_ && s->skipped == p.request.step()) {
      skipped = true;
      nonfinite.insert(s->nonfinite_ranks.begin(), s->nonfinite_ranks.end());
    }
    if (p.request.optimizer_state()) {
      // Slot state_slot of the state (docs/wire.md); zeros for a slot the optimizer lacks.
      const int slot = p.request.state_slot();
      Tensor mom = updater_ && slot >= 0 && slot < updater_->state_slots() ? updater_->StateSlot(s->id, s->value, slot)
                                                                          : Tensor::Zeros({s->length}, DType::kF32);
      r.data.push_back(ConvertForWire(mom, dtype));
    } else {
      r.data.push_back(ConvertForWire(s->value, dtype));
    }
  }
  r.meta.set_stop(stop);
  r.meta.set_skipped(skipped);
  for (int rank : nonfinite) r.meta.add_nonfinite_workers(rank);
  if (!async_ && p.request.step() >= 0) hooks_->Annotate(p.request.step(), &r.meta);
  if (recorder_ && p.request.step() >= 0) {
    profile::StepRecord* load = StepLoad(p.request.step(), profile::NowUs());
    for (const Tensor& t : r.data) load->bytes_out += static_cast<int64_t>(t.nbytes());
  }
  Status st = send_(p.request.sender_id(), std::move(r));
  if (!st.ok()) LOG(WARNING) << "server: pull answer to node " << p.request.sender_id() << " failed: " << st;
}

Status ServerCore::HandleSetLr(const Message& msg) {
  const wire::Meta& m = msg.meta;
  const float lr = m.lr();
  if (!(lr >= 0) || !std::isfinite(lr)) return Status::InvalidArgument("lr " + std::to_string(lr));
  if (!updater_) return Status::InvalidArgument("SET_LR without an optimizer");
  if (async_) {
    lr_.Reset(lr);
    return Status::Ok();
  }
  if (m.step() < 0) return Status::InvalidArgument("step " + std::to_string(m.step()) + " is negative");
  int64_t next = m.step();
  for (const auto& kv : slices_) next = std::min(next, kv.second->applied + 1);
  lr_.SetFrom(m.step(), lr, next);
  return Status::Ok();
}

ServerSlice* ServerCore::Find(uint64_t key, uint64_t offset) const {
  auto it = slices_.find({key, offset});
  return it == slices_.end() ? nullptr : it->second.get();
}

ServerSlice* ServerCore::Slot(uint64_t key, uint64_t offset) {
  std::unique_ptr<ServerSlice>& slot = slices_[{key, offset}];
  if (!slot) {
    slot = std::make_unique<ServerSlice>();
    slot->id = static_cast<int>(slices_.size()) - 1;
  }
  return slot.get();
}

}  // namespace tally
