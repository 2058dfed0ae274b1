#include "kvstore/dist_channel.h"

#include <algorithm>
#include <chrono>
#include <string>

#include <glog/logging.h>

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
    KVStore::Membership change;
    change.epoch = meta.membership_epoch();
    change.from_step = meta.step();
    for (const wire::Node& n : meta.nodes()) change.live.push_back(n.rank());
    std::sort(change.live.begin(), change.live.end());
    {
      std::lock_guard<std::mutex> l(membership_mu_);
      const bool known = std::any_of(changes_.begin(), changes_.end(),
                                     [&](const KVStore::Membership& c) { return c.epoch == change.epoch; });
      if (!known) {
        if (change.epoch > membership_.epoch) membership_ = change;
        changes_.push_back(change);
        std::sort(changes_.begin(), changes_.end(),
                  [](const KVStore::Membership& a, const KVStore::Membership& b) { return a.epoch < b.epoch; });
      }
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

Status DistChannel::HeardMembership(std::vector<KVStore::Membership>* out, int timeout_ms) {
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
