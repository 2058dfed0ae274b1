#include "kvstore/dist_channel.h"

#include <algorithm>
#include <chrono>
#include <string>

#include <glog/logging.h>

#include "profile/trace.h"

namespace tally {

namespace {

// What may be gathered: requests of at most this many bytes each way, up to this many in
// one message and this many bytes in all. Larger requests gain nothing from company, and
// a large gathered message would hold back its first slices' answers.
constexpr int64_t kGatherBytes = 64 << 10;
constexpr int kGatherSlices = 64;
constexpr int64_t kGatherTotal = 256 << 10;
// Requests sent from the caller's thread less than this apart make a burst.
constexpr auto kBurstGap = std::chrono::microseconds(100);

// A request's bytes each way at most (a PULL sends none but is answered with its values):
// its slice's values at 4 bytes, the widest dtype.
int64_t SliceBytes(const Message& m) {
  int64_t n = 0;
  for (const wire::KeySlice& s : m.meta.slices()) n += static_cast<int64_t>(s.length()) * 4;
  return n;
}

// The commands whose answer completes the data of one key (WaitKey).
bool KeyCommand(wire::Command c) {
  return c == wire::PUSH || c == wire::PULL || c == wire::PUSHPULL || c == wire::ROLLBACK;
}

// What the Gather hook gets at once, from the queue.
SendQueue::GatherLimits GatherLimits() {
  SendQueue::GatherLimits g;
  g.max_items = kGatherSlices;
  g.max_bytes = kGatherTotal;
  return g;
}

bool Gatherable(const Message& m) {
  const wire::Command c = m.meta.command();
  return (c == wire::PUSH || c == wire::PULL || c == wire::PUSHPULL) && m.meta.slices_size() == 1 &&
         SliceBytes(m) <= kGatherBytes;
}

// The Meta without what differs between requests that may travel together.
std::string Shared(const wire::Meta& meta) {
  wire::Meta m = meta;
  m.clear_slices();
  m.clear_request_id();
  m.clear_priority();
  return m.SerializeAsString();
}

}  // namespace

DistChannel::DistChannel(Cluster* cluster, bool spares_take_places)
    : cluster_(cluster),
      spares_take_places_(spares_take_places),
      chains_(cluster->num_servers(), cluster->server_replicas()),
      queue_(
          [cluster](int node) { return cluster->UnacknowledgedBytes(node); }, SendCreditBytes(cluster->num_workers()),
          [this](SendQueue::Item&& out) { return Send(std::move(out)); },
          [this](SendQueue::Item* first, std::vector<SendQueue::Item>* more) { Gather(first, more); },
          GatherLimits(), "sender") {
  queue_.WakeOnAcknowledgements(cluster);
}

void DistChannel::Start() { queue_.Start(); }

void DistChannel::Stop() { queue_.Stop(); }

void DistChannel::Enqueue(int node, Message msg, int priority, PendingRequest pending) {
  std::unique_lock<std::mutex> l(mu());
  const uint64_t id = next_id_++;
  msg.meta.set_request_id(id);
  msg.meta.set_priority(priority);
  if (chains_.Lost(cluster_->ids().ServerRank(node)) && Redirect(&pending, &node)) return;
  msg.meta.set_receiver_id(node);
  pending.node = node;
  if (cluster_->server_replicas() > 0) pending.request = msg;
  if (KeyCommand(pending.command)) ++key_pending_[pending.key];
  pending_[id] = std::move(pending);
  // A small request right after another sent from here, that one still unanswered, is
  // likely one of a burst (a model's arrays, key after key): it waits for the sending
  // thread, which gathers what the burst adds meanwhile. One request at a time (a round
  // trip each) goes at once.
  const bool gatherable = Gatherable(msg);
  const bool burst = gatherable && last_direct_small_ && pending_.size() > 1 &&
                     std::chrono::steady_clock::now() - last_direct_end_ < kBurstGap;
  SendQueue::Item item;
  item.node = node;
  if (gatherable) {
    item.group = Shared(msg.meta);
    item.gather_bytes = SliceBytes(msg);
  }
  item.msg = std::move(msg);
  bool sent_now = false;
  queue_.Send(l, std::move(item), priority, /*may_go_now=*/!burst, &sent_now);  // a failure finishes the request
  if (sent_now) {
    last_direct_small_ = gatherable;
    last_direct_end_ = std::chrono::steady_clock::now();
  }
}

void DistChannel::Gather(SendQueue::Item* first, std::vector<SendQueue::Item>* more) {
  std::vector<uint64_t> ids{first->msg.meta.request_id()};
  for (SendQueue::Item& item : *more) {
    Message& m = item.msg;
    *first->msg.meta.add_slices() = m.meta.slices(0);
    for (Tensor& t : m.data) first->msg.data.push_back(std::move(t));
    ids.push_back(m.meta.request_id());
  }
  gathered_[ids[0]] = std::move(ids);
}

std::vector<uint64_t> DistChannel::Gathered(uint64_t id) {
  std::lock_guard<std::mutex> l(mu());
  auto it = gathered_.find(id);
  if (it == gathered_.end()) return {id};
  std::vector<uint64_t> ids = std::move(it->second);
  gathered_.erase(it);
  return ids;
}

Status DistChannel::Send(SendQueue::Item&& out) {
  const uint64_t id = out.msg.meta.request_id();
  const wire::Command command = out.msg.meta.command();
  profile::Tracer& tracer = profile::Tracer::Get();
  const int64_t t0 = tracer.enabled() ? profile::NowUs() : 0;
  const double key = out.msg.meta.slices_size() > 0 ? static_cast<double>(out.msg.meta.slices(0).key()) : -1;
  const int64_t bytes = static_cast<int64_t>(DataBytes(out.msg));
  Status s = cluster_->Send(out.node, std::move(out.msg));
  if (t0 != 0) {
    tracer.Complete(wire::Command_Name(command).c_str(), "comm", t0, profile::NowUs() - t0, "key", key, "bytes",
                    static_cast<double>(bytes));
  }
  if (!s.ok()) {
    const Status failed = Status::Unavailable("kvstore: sending " + wire::Command_Name(command) + " to server " +
                                              std::to_string(cluster_->ids().ServerRank(out.node)) + ": " +
                                              s.message());
    for (uint64_t gathered : Gathered(id)) Finish(gathered, failed);
  }
  return Status::Ok();  // the failure is its requests'
}

void DistChannel::Finish(uint64_t id, const Status& s) {
  bool wake_waiters = false;
  {
    std::lock_guard<std::mutex> l(mu());
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    bool key_done = false;
    if (KeyCommand(it->second.command)) {
      auto k = key_pending_.find(it->second.key);
      if (--k->second == 0) {
        key_done = static_cast<int64_t>(k->first) == waited_key_;
        key_pending_.erase(k);
      }
    }
    pending_.erase(it);
    if (!s.ok() && error_.ok()) error_ = s;
    // WaitAll waits for all of them and WaitKey for one key: waking them for every answer
    // would cost a context switch per key.
    wake_waiters = pending_.empty() || key_done;
  }
  if (wake_waiters) done_cv_.notify_all();
}

int DistChannel::RouteLocked(int server_rank) const {
  if (server_rank >= chains_.size()) return cluster_->ServerId(server_rank);  // a spare's own requests
  const std::vector<int>& holders = chains_.Holders(server_rank);
  // None left: the scheduler ends the job.
  return cluster_->ServerId(holders.empty() ? server_rank : holders.front());
}

std::vector<int> DistChannel::Holders(int server_rank) const {
  std::lock_guard<std::mutex> l(mu());
  return chains_.Holders(server_rank);
}

void DistChannel::EnqueueToChain(int chain, Message msg, int priority, PendingRequest pending) {
  int node;
  {
    std::lock_guard<std::mutex> l(mu());
    node = RouteLocked(chain);
  }
  pending.chain = chain;
  Enqueue(node, std::move(msg), priority, std::move(pending));
}

bool DistChannel::Redirect(PendingRequest* p, int* node) {
  if (p->replica_copy || !KeyCommand(p->command) || p->chain < 0) return true;
  *node = RouteLocked(p->chain);
  p->node = *node;
  return false;
}

void DistChannel::ServerLost(int server_rank, int spare) {
  const int dead = cluster_->ServerId(server_rank);
  std::vector<uint64_t> dropped;
  {
    std::lock_guard<std::mutex> l(mu());
    const std::vector<int> held = chains_.ChainsOf(server_rank);
    chains_.Lose(server_rank, spares_take_places_ ? spare : -1);
    std::set<uint64_t> queued;
    queue_.Filter([&](SendQueue::Item* out) {
      const uint64_t id = out->msg.meta.request_id();
      auto p = pending_.find(id);
      if (out->node != dead || p == pending_.end()) return true;
      queued.insert(id);
      if (Redirect(&p->second, &out->node)) {
        dropped.push_back(id);
        return false;
      }
      out->msg.meta.set_receiver_id(out->node);
      return true;
    });
    // Sent and unanswered: the answers will never come; each request goes again on its own.
    for (auto& [id, p] : pending_) {
      if (p.node != dead || queued.count(id)) continue;
      gathered_.erase(id);
      int node = dead;
      if (Redirect(&p, &node)) {
        dropped.push_back(id);
        continue;
      }
      SendQueue::Item again;
      again.node = node;
      again.msg = p.request;
      again.msg.meta.set_receiver_id(node);
      const int priority = again.msg.meta.priority();
      queue_.Enqueue(std::move(again), priority);
    }
    std::string served;
    for (int c : held) {
      served += (served.empty() ? "" : ", ") + std::to_string(c) + " by server " +
                std::to_string(cluster_->ids().ServerRank(RouteLocked(c)));
    }
    LOG(WARNING) << "kvstore: server " << server_rank << " lost: " << dropped.size() << " requests for it dropped"
                 << (held.empty() ? std::string(" (it held no slices)") : "; its chains now served: " + served);
  }
  for (uint64_t id : dropped) Finish(id, Status::Ok());
  queue_.Wake();
}

void DistChannel::OnFailure(const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu());
    if (failure_.ok()) failure_ = s.ok() ? Status::Unavailable("the job failed") : s;
  }
  done_cv_.notify_all();
}

void DistChannel::OnMessage(Message&& m) {
  const wire::Meta& meta = m.meta;
  if (meta.command() == wire::SERVER_LOST) {
    if (meta.sender_id() == kSchedulerId && meta.nodes_size() >= 1) {
      ServerLost(meta.nodes(0).rank(), meta.nodes_size() > 1 ? meta.nodes(1).rank() : -1);
    }
    return;
  }
  if (meta.command() != wire::RESPONSE) {
    LOG(WARNING) << "kvstore: ignoring " << wire::Command_Name(meta.command()) << " from node "
                 << meta.sender_id() << ": a worker serves no requests";
    return;
  }
  const std::vector<uint64_t> ids = Gathered(meta.request_id());
  std::vector<PendingRequest> ps;
  {
    std::lock_guard<std::mutex> l(mu());
    for (uint64_t id : ids) {
      auto it = pending_.find(id);
      if (it == pending_.end()) {
        LOG(WARNING) << "kvstore: ignoring an answer to unknown request " << id << " from node " << meta.sender_id();
        return;
      }
      ps.push_back(it->second);  // copies views and pointers only
    }
  }
  const PendingRequest& first = ps[0];
  const std::string what = wire::Command_Name(first.command) + " of key " + std::to_string(first.key) +
                           (ids.size() > 1 ? " and " + std::to_string(ids.size() - 1) + " more" : "") +
                           " to server " + std::to_string(cluster_->ids().ServerRank(first.node));
  auto finish_all = [&](const Status& s) {
    for (uint64_t id : ids) Finish(id, s);
  };
  if (!meta.error().empty()) return finish_all(Status::InvalidArgument("kvstore: " + what + " refused: " + meta.error()));
  if (meta.skipped() && first.command != wire::ROLLBACK) NoteSkip(meta, first.key);
  if (first.command != wire::PULL && first.command != wire::PUSHPULL && first.command != wire::ROLLBACK) {
    return finish_all(Status::Ok());
  }
  Status s = ValidateMessage(m);
  if (s.ok() && static_cast<size_t>(meta.slices_size()) != ids.size()) s = Status::Internal("a slice count unlike the request's");
  for (size_t i = 0; s.ok() && i < ids.size(); ++i) {
    if (static_cast<int64_t>(meta.slices(i).length()) != ps[i].length ||
        static_cast<int64_t>(meta.slices(i).offset()) != ps[i].offset) {
      s = Status::Internal("the answer's slices do not match the request");
    }
  }
  if (!s.ok()) return finish_all(Status::Internal("kvstore: answer to " + what + ": " + s.message()));
  if (meta.stop()) stop_seen_ = true;
  for (size_t i = 0; i < ids.size(); ++i) Complete(ids[i], ps[i], m, static_cast<int>(i));
}

void DistChannel::Complete(uint64_t id, const PendingRequest& p, const Message& m, int i) {
  if (p.pull == nullptr) {  // a ROLLBACK of a key never pulled: nothing to write
    Finish(id, Status::Ok());
    return;
  }
  // Copied on this thread, outside the lock: the store's thread waits in WaitAll meanwhile.
  const int64_t t0 = profile::NowUs();
  p.pull->flat.Slice(p.offset, p.offset + p.length).CopyFrom(m.data[i]);
  if (p.pull->remaining.fetch_sub(1) == 1) {
    for (Tensor& o : p.pull->others) o.CopyFrom(p.pull->flat);
  }
  const int64_t dur = profile::NowUs() - t0;
  pull_us_ += dur;
  profile::Tracer::Get().Complete("pull", "comm", t0, dur, "key", static_cast<double>(p.key), "bytes",
                                  static_cast<double>(m.data[i].nbytes()));
  Finish(id, Status::Ok());
}

void DistChannel::NoteSkip(const wire::Meta& meta, uint64_t key) {
  std::lock_guard<std::mutex> l(mu());
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
  std::lock_guard<std::mutex> l(mu());
  if (skip_.step < 0) return false;
  *out = skip_;
  skip_ = KVStore::SkippedStep();
  return true;
}

Status DistChannel::WaitKey(uint64_t key, int timeout_ms) {
  Status cluster_failure = cluster_->failure();
  if (!cluster_failure.ok()) OnFailure(cluster_failure);
  std::unique_lock<std::mutex> l(mu());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  waited_key_ = static_cast<int64_t>(key);
  while (key_pending_.count(key) && failure_.ok()) {
    if (done_cv_.wait_until(l, deadline) == std::cv_status::timeout && key_pending_.count(key) && failure_.ok()) {
      waited_key_ = -1;
      return Status::Unavailable("kvstore: key " + std::to_string(key) + " unanswered after " +
                                 std::to_string(timeout_ms) + " ms");
    }
  }
  waited_key_ = -1;
  return failure_;
}

Status DistChannel::WaitAll(int timeout_ms) {
  Status cluster_failure = cluster_->failure();
  if (!cluster_failure.ok()) OnFailure(cluster_failure);
  std::unique_lock<std::mutex> l(mu());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pending_.empty() && failure_.ok()) {
    if (done_cv_.wait_until(l, deadline) == std::cv_status::timeout && !pending_.empty() &&
        failure_.ok()) {
      const PendingRequest& first = pending_.begin()->second;
      return Status::Unavailable("kvstore: " + std::to_string(pending_.size()) +
                                 " requests unanswered after " + std::to_string(timeout_ms) +
                                 " ms (the oldest: " + wire::Command_Name(first.command) + " of key " +
                                 std::to_string(first.key) + " to server " +
                                 std::to_string(cluster_->ids().ServerRank(first.node)) + ")");
    }
  }
  if (!failure_.ok()) return failure_;
  Status e = error_;
  error_ = Status::Ok();
  return e;
}

}  // namespace tally
