#include "kvstore/dist_channel.h"

#include <algorithm>
#include <chrono>

#include <glog/logging.h>

#include "profile/trace.h"

namespace tally {

DistChannel::DistChannel(Cluster* cluster) : cluster_(cluster) {}

DistChannel::~DistChannel() { CHECK(!sender_.joinable()) << "DistChannel destroyed before Stop"; }

void DistChannel::Start() { sender_ = std::thread([this] { SendLoop(); }); }

void DistChannel::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  send_cv_.notify_all();
  if (sender_.joinable()) sender_.join();
}

void DistChannel::Enqueue(int node, Message msg, int priority, PendingRequest pending) {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t id = next_id_++;
  msg.meta.set_request_id(id);
  msg.meta.set_receiver_id(node);
  msg.meta.set_priority(priority);
  pending.node = node;
  pending_[id] = std::move(pending);
  if (queue_.empty() && !sending_) {
    // Nothing waits and nothing is on its way: this message goes first whatever its
    // priority, so send it from here and spare the wakeup of the sending thread.
    sending_ = true;
    l.unlock();
    Send(Outgoing{node, std::move(msg)});
    l.lock();
    sending_ = false;
    const bool more = !queue_.empty() || stop_;
    l.unlock();
    if (more) send_cv_.notify_one();
    return;
  }
  queue_.emplace(std::make_pair(-static_cast<int64_t>(priority), next_seq_++),
                 Outgoing{node, std::move(msg)});
  l.unlock();
  send_cv_.notify_one();
}

void DistChannel::Send(Outgoing out) {
  const uint64_t id = out.msg.meta.request_id();
  const wire::Command command = out.msg.meta.command();
  profile::Tracer& tracer = profile::Tracer::Get();
  const int64_t t0 = tracer.enabled() ? profile::NowUs() : 0;
  const double key = out.msg.meta.slices_size() > 0 ? static_cast<double>(out.msg.meta.slices(0).key()) : -1;
  int64_t bytes = 0;
  for (const Tensor& t : out.msg.data) bytes += t.nbytes();
  Status s = cluster_->Send(out.node, std::move(out.msg));
  if (t0 != 0) {
    tracer.Complete(wire::Command_Name(command).c_str(), "comm", t0, profile::NowUs() - t0, "key", key, "bytes",
                    static_cast<double>(bytes));
  }
  if (!s.ok()) {
    Finish(id, Status::Unavailable("kvstore: sending " + wire::Command_Name(command) + " to server " +
                                   std::to_string(cluster_->ids().ServerRank(out.node)) + ": " + s.message()));
  }
}

void DistChannel::SendLoop() {
  profile::Tracer::Get().NameThread("sender");
  for (;;) {
    std::unique_lock<std::mutex> l(mu_);
    send_cv_.wait(l, [&] { return !sending_ && (stop_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stop_, and everything is sent
    Outgoing out = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    sending_ = true;
    l.unlock();
    Send(std::move(out));
    l.lock();
    sending_ = false;
  }
}

void DistChannel::Finish(uint64_t id, const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (pending_.erase(id) == 0) return;
    if (!s.ok() && error_.ok()) error_ = s;
    // WaitAll waits for all of them: waking it for each answer would cost a context
    // switch per key.
    if (!pending_.empty()) return;
  }
  done_cv_.notify_all();
}

void DistChannel::OnFailure(const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failure_.ok()) failure_ = s.ok() ? Status::Unavailable("the job failed") : s;
  }
  done_cv_.notify_all();
}

void DistChannel::OnMessage(Message&& m) {
  const wire::Meta& meta = m.meta;
  if (meta.command() != wire::RESPONSE) {
    LOG(WARNING) << "kvstore: ignoring " << wire::Command_Name(meta.command()) << " from node "
                 << meta.sender_id() << ": a worker serves no requests";
    return;
  }
  PendingRequest p;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pending_.find(meta.request_id());
    if (it == pending_.end()) {
      LOG(WARNING) << "kvstore: ignoring an answer to unknown request " << meta.request_id()
                   << " from node " << meta.sender_id();
      return;
    }
    p = it->second;  // copies views and pointers only
  }
  const std::string what = wire::Command_Name(p.command) + " of key " + std::to_string(p.key) +
                           " to server " + std::to_string(cluster_->ids().ServerRank(p.node));
  if (!meta.error().empty()) {
    Finish(meta.request_id(), Status::InvalidArgument("kvstore: " + what + " refused: " + meta.error()));
    return;
  }
  if (meta.skipped() && p.command != wire::ROLLBACK) NoteSkip(meta, p.key);
  if (p.command != wire::PULL && p.command != wire::PUSHPULL && p.command != wire::ROLLBACK) {
    Finish(meta.request_id(), Status::Ok());
    return;
  }
  Status s = ValidateMessage(m);
  if (s.ok() && (meta.slices_size() != 1 || static_cast<int64_t>(meta.slices(0).length()) != p.length ||
                 static_cast<int64_t>(meta.slices(0).offset()) != p.offset)) {
    s = Status::Internal("the answer's slices do not match the request");
  }
  if (!s.ok()) {
    Finish(meta.request_id(), Status::Internal("kvstore: answer to " + what + ": " + s.message()));
    return;
  }
  if (meta.stop()) stop_seen_ = true;
  if (p.pull == nullptr) {  // a ROLLBACK of a key never pulled: nothing to write
    Finish(meta.request_id(), Status::Ok());
    return;
  }
  // Copied on this thread, outside the lock: the store's thread waits in WaitAll meanwhile.
  const int64_t t0 = profile::NowUs();
  p.pull->flat.Slice(p.offset, p.offset + p.length).CopyFrom(m.data[0]);
  if (p.pull->remaining.fetch_sub(1) == 1) {
    for (Tensor& o : p.pull->others) o.CopyFrom(p.pull->flat);
  }
  const int64_t dur = profile::NowUs() - t0;
  pull_us_ += dur;
  profile::Tracer::Get().Complete("pull", "comm", t0, dur, "key", static_cast<double>(p.key), "bytes",
                                  static_cast<double>(m.data[0].nbytes()));
  Finish(meta.request_id(), Status::Ok());
}

void DistChannel::NoteSkip(const wire::Meta& meta, uint64_t key) {
  std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
  if (skip_.step < 0) return false;
  *out = skip_;
  skip_ = KVStore::SkippedStep();
  return true;
}

Status DistChannel::WaitAll(int timeout_ms) {
  Status cluster_failure = cluster_->failure();
  if (!cluster_failure.ok()) OnFailure(cluster_failure);
  std::unique_lock<std::mutex> l(mu_);
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
