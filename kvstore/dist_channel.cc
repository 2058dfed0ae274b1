#include "kvstore/dist_channel.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <string>

#include <glog/logging.h>

#include "net/command_rules.h"

namespace tally {

namespace {

// The commands whose answers carry values: the pulled ones, or (ROLLBACK) the restored ones.
bool AnsweredWithValues(wire::Command c) { return c == wire::PULL || c == wire::PUSHPULL || c == wire::ROLLBACK; }

RequestOptions ChannelOptions(Cluster* cluster) {
  RequestOptions o;
  o.prefix = "kvstore";
  o.keep_for_resend = cluster->server_replicas() > 0;  // a lost server's requests go again
  return o;
}

}  // namespace

wire::OptimizerConfig ToWireOptimizer(const OptimizerConfig& c) {
  wire::OptimizerConfig w;
  w.set_type(c.type);
  w.set_lr(c.lr);
  w.set_momentum(c.momentum);
  w.set_wd(c.wd);
  w.set_rescale_grad(c.rescale_grad);
  w.set_clip_gradient(c.clip_gradient);
  w.set_multi_precision(c.multi_precision);
  for (int key : c.no_wd_keys) w.add_no_wd_keys(key);
  w.set_beta1(c.beta1);
  w.set_beta2(c.beta2);
  w.set_epsilon(c.epsilon);
  w.set_gamma1(c.gamma1);
  w.set_gamma2(c.gamma2);
  w.set_centered(c.centered);
  w.set_clip_weights(c.clip_weights);
  w.set_eta(c.eta);
  w.set_no_momentum_correction(!c.momentum_correction);
  w.set_wd_lh(c.wd_lh);
  w.set_lower_bound(c.lower_bound);
  w.set_upper_bound(c.upper_bound);
  w.set_no_bias_correction(!c.bias_correction);
  w.set_no_lazy_update(!c.lazy_update);
  return w;
}

DistChannel::DistChannel(Cluster* cluster, bool spares_take_places)
    : cluster_(cluster),
      router_([cluster] { return cluster->ids(); }, cluster->server_replicas(), spares_take_places),
      requests_(cluster, ChannelOptions(cluster),
                [this](PendingRequest* p, int* node) { return router_.Reroute(p, node); }) {}

void DistChannel::ServerLost(int server_rank, int spare) {
  const std::vector<int> held = router_.Lose(server_rank, spare);
  const int dropped = requests_.NodeLost(cluster_->ServerId(server_rank));
  LOG(WARNING) << "kvstore: server " << server_rank << " lost: " << dropped << " requests for it dropped"
               << (held.empty() ? std::string(" (it held no slices)")
                                : "; its chains now served: " + router_.Describe(held));
}

void DistChannel::OnMessage(Message&& m) {
  const wire::Meta& meta = m.meta;
  if (meta.command() == wire::SERVER_LOST) {
    if (meta.sender_id() == kSchedulerId && meta.nodes_size() >= 1) {
      ServerLost(meta.nodes(0).rank(), meta.nodes_size() > 1 ? meta.nodes(1).rank() : -1);
    }
    return;
  }
  if (meta.command() == wire::MEMBERSHIP) {  // --elastic: the servers act on it; noted here
    LOG(INFO) << "kvstore: membership " << meta.membership_epoch() << ": from step " << meta.step() << ", "
              << meta.nodes_size() << " live workers";
    MembershipView::Membership change;
    change.epoch = meta.membership_epoch();
    change.from_step = meta.step();
    for (const wire::Node& n : meta.nodes()) change.live.push_back(n.rank());
    std::sort(change.live.begin(), change.live.end());
    {
      std::lock_guard<std::mutex> l(membership_mu_);
      const bool known = std::any_of(changes_.begin(), changes_.end(),
                                     [&](const MembershipView::Membership& c) { return c.epoch == change.epoch; });
      if (!known) {
        applied_[change.epoch] = meta.applied_max();
        if (change.epoch > membership_.epoch) membership_ = change;
        changes_.push_back(change);
        std::sort(changes_.begin(), changes_.end(),
                  [](const MembershipView::Membership& a, const MembershipView::Membership& b) {
                    return a.epoch < b.epoch;
                  });
      }
    }
    membership_cv_.notify_all();
    return;
  }
  if (meta.command() == wire::LOSS_SCALE) {  // a worker's (Cluster checked), to this one joining: LossScaleFor
    TrainerHooks::LossScaleState state;
    state.scale = meta.grad_scale();
    state.clean = meta.scale_clean_steps();
    state.overflows = meta.scale_overflows();
    {
      std::lock_guard<std::mutex> l(membership_mu_);
      scales_[meta.sender_id()] = {meta.step(), state};
    }
    membership_cv_.notify_all();
    return;
  }
  if (meta.command() != wire::RESPONSE) {
    LOG(WARNING) << "kvstore: ignoring " << wire::Command_Name(meta.command()) << " from node "
                 << meta.sender_id() << ": a worker serves no requests";
    return;
  }
  Requests::Answer a;
  if (!requests_.Match(m, &a)) return;
  const PendingRequest& first = a.requests[0];
  const Status refused = requests_.Refusal(m, a);
  if (!refused.ok()) return requests_.FinishAll(a, refused);
  if (meta.skipped() && first.command != wire::ROLLBACK) NoteSkip(meta, first.key);
  if (!AnsweredWithValues(first.command)) return requests_.FinishAll(a, Status::Ok());
  const Status s = requests_.CheckValues(m, a);
  if (!s.ok()) return requests_.FinishAll(a, s);
  if (meta.stop()) stop_seen_ = true;
  if (meta.num_workers() > 0) summed_workers_ = meta.num_workers();
  if (meta.membership_epoch() > 0) {
    std::lock_guard<std::mutex> l(membership_mu_);
    answered_epoch_ = std::max(answered_epoch_, meta.membership_epoch());
  }
  for (size_t i = 0; i < a.ids.size(); ++i) pull_us_ += requests_.Complete(a, m, i);
}

Status DistChannel::HeardMembership(std::vector<MembershipView::Membership>* out, int timeout_ms) {
  std::unique_lock<std::mutex> l(membership_mu_);
  // Epochs are numbered 1, 2, ...: all up to the named one are in when there are as many.
  const bool heard = membership_cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] {
    return !failure_.ok() || static_cast<int64_t>(changes_.size()) >= answered_epoch_;
  });
  if (!failure_.ok()) return failure_;
  if (!heard) {
    return Status::Unavailable("kvstore: no MEMBERSHIP " + std::to_string(answered_epoch_) +
                               " from the scheduler within " + std::to_string(timeout_ms) +
                               " ms, though a server's answer named it");
  }
  *out = changes_;
  return Status::Ok();
}

Status DistChannel::JoinedFrom(int rank, int64_t after, int timeout_ms, int64_t* from_step, int64_t* applied) {
  std::unique_lock<std::mutex> l(membership_mu_);
  const MembershipView::Membership* joined = nullptr;
  membership_cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] {
    for (const MembershipView::Membership& c : changes_) {
      if (c.epoch > after && std::find(c.live.begin(), c.live.end(), rank) != c.live.end()) {
        joined = &c;
        return true;
      }
    }
    return !failure_.ok();
  });
  if (joined != nullptr) {
    *from_step = joined->from_step;
    auto it = applied_.find(joined->epoch);
    *applied = it == applied_.end() ? -1 : it->second;
    return Status::Ok();
  }
  if (!failure_.ok()) return failure_;
  return Status::Unavailable("kvstore: worker " + std::to_string(rank) + " joined the running job after membership " +
                             std::to_string(after) + ", but no MEMBERSHIP naming it live came within " +
                             std::to_string(timeout_ms) + " ms");
}

Status DistChannel::ReachStep(int key, const std::vector<Placement::Slice>& slices, int64_t applied, int64_t step,
                              int timeout_ms) {
  int64_t length = 0;
  for (const Placement::Slice& sl : slices) length = std::max(length, sl.offset + sl.length);
  for (int64_t reach = applied + 3; step > reach; reach += 3) {
    auto op = std::make_shared<PullOp>();
    op->flat = Tensor::Empty({length}, DType::kF32);
    op->remaining = static_cast<int>(slices.size());
    for (const Placement::Slice& sl : slices) {
      Message m;
      m.meta.set_command(wire::PULL);
      m.meta.set_step(reach);
      m.meta.set_num_workers(cluster_->num_workers());
      m.meta.set_pull_dtype(wire::F32);
      wire::KeySlice* ks = m.meta.add_slices();
      ks->set_key(key);
      ks->set_offset(sl.offset);
      ks->set_length(sl.length);
      PendingRequest p;
      p.command = wire::PULL;
      p.key = key;
      p.pull = op;
      p.offset = sl.offset;
      p.length = sl.length;
      EnqueueToChain(sl.server, std::move(m), INT_MAX, std::move(p));
    }
    TALLY_RETURN_IF_ERROR(WaitAll(timeout_ms));
  }
  return Status::Ok();
}

Status DistChannel::TellLossScale(int rank, int64_t step, const TrainerHooks::LossScaleState& state) {
  Message m;
  m.meta.set_command(wire::LOSS_SCALE);
  m.meta.set_step(step);
  m.meta.set_grad_scale(state.scale);
  m.meta.set_scale_clean_steps(state.clean);
  m.meta.set_scale_overflows(state.overflows);
  return cluster_->Send(cluster_->WorkerId(rank), std::move(m));
}

Status DistChannel::LossScaleFor(int64_t step, int teller, int timeout_ms, TrainerHooks::LossScaleState* out) {
  const int from = teller >= 0 ? cluster_->WorkerId(teller) : -1;
  std::unique_lock<std::mutex> l(membership_mu_);
  const bool told = membership_cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] {
    return !failure_.ok() || (scales_.count(from) > 0 && scales_.at(from).first == step);
  });
  for (const auto& [sender, told_scale] : scales_) {  // nobody else may say it
    const Status why = CheckLossScaleTeller(cluster_->ids(), sender, teller, told_scale.first);
    if (!why.ok()) LOG(WARNING) << "kvstore: refused " << why.message();
  }
  if (!failure_.ok()) return failure_;
  if (!told) {
    return Status::Unavailable("kvstore: no LOSS_SCALE for step " + std::to_string(step) + " from worker " +
                               std::to_string(teller) + ", the lead before this join, within " +
                               std::to_string(timeout_ms) + " ms");
  }
  *out = scales_.at(from).second;
  LOG(INFO) << "kvstore: worker " << teller << "'s loss scale for step " << step << ": " << out->scale;
  return Status::Ok();
}

void DistChannel::NoteSkip(const wire::Meta& meta, uint64_t key) {
  std::lock_guard<std::mutex> l(skip_mu_);
  if (skip_.step >= 0 && skip_.step != meta.step()) return;  // one step per WaitAll is reported
  if (skip_.step < 0 || static_cast<int>(key) < skip_.key) {
    skip_.step = meta.step();
    skip_.key = static_cast<int>(key);
  }
  for (int r : meta.nonfinite_workers()) {
    if (std::find(skip_.workers.begin(), skip_.workers.end(), r) == skip_.workers.end()) skip_.workers.push_back(r);
  }
  std::sort(skip_.workers.begin(), skip_.workers.end());
}

bool DistChannel::TakeSkip(KVStore::SkippedStep* out) {
  std::lock_guard<std::mutex> l(skip_mu_);
  if (skip_.step < 0) return false;
  *out = skip_;
  skip_ = KVStore::SkippedStep();
  return true;
}

}  // namespace tally
