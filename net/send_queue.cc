#include "net/send_queue.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <glog/logging.h>

#include "profile/trace.h"

namespace tally {
namespace {

// The queue allowed before a shared link, over its connections, and the least per
// connection (one large message at a time below that).
constexpr int64_t kSharedQueueBytes = 64 << 20;
constexpr int64_t kMinCreditBytes = 1 << 20;

}  // namespace

int64_t SendCreditBytes(int sharers) {
  const int64_t fair = std::max<int64_t>(kMinCreditBytes, kSharedQueueBytes / std::max(1, sharers));
  const char* kb = std::getenv("TALLY_SEND_CREDIT_KB");
  if (kb == nullptr || *kb == '\0') return fair;
  char* end = nullptr;
  const long v = std::strtol(kb, &end, 10);
  if (v < 1 || v > (64L << 20) || *end != '\0') {
    LOG(WARNING) << "TALLY_SEND_CREDIT_KB='" << kb << "' is not a number of KB in 1..67108864; using "
                 << (fair >> 10);
    return fair;
  }
  return static_cast<int64_t>(v) << 10;
}

SendQueue::SendQueue(UnackedFn unacked, int64_t credit, TransmitFn transmit, GatherFn gather, GatherLimits limits,
                     const char* thread_name)
    : unacked_(std::move(unacked)),
      credit_(credit),
      transmit_(std::move(transmit)),
      gather_(std::move(gather)),
      limits_(limits),
      thread_name_(thread_name) {}

void SendQueue::Start() {
  thread_ = std::thread([this] {
    if (thread_name_ != nullptr) profile::Tracer::Get().NameThread(thread_name_);
    Loop();
  });
}

SendQueue::~SendQueue() {
  if (ack_source_ != nullptr) ack_source_->RemoveAckListener(ack_key_);
  Stop();
}

void SendQueue::WakeOnAcknowledgements(Cluster* cluster) {
  CHECK(ack_source_ == nullptr) << "WakeOnAcknowledgements twice";
  ack_source_ = cluster;
  ack_key_ = cluster->AddAckListener([this](int) { Wake(); });
}

void SendQueue::Wake() {
  // Through the lock: the sending thread is then either before its look at the credit, which
  // sees the change, or waiting, which this wakes; never in between, where a bare notify
  // would be lost.
  { std::lock_guard<std::mutex> l(mu_); }
  cv_.notify_all();
}

void SendQueue::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  } else {
    Loop();  // never started: what is queued leaves from here
  }
}

Status SendQueue::Send(std::unique_lock<std::mutex>& l, Item item, int priority, bool may_go_now, bool* sent_now) {
  const bool now = may_go_now && queue_.empty() && !sending_ && HasCredit(item);
  if (sent_now != nullptr) *sent_now = now;
  if (!now) {
    Enqueue(std::move(item), priority);
    cv_.notify_one();
    return Status::Ok();
  }
  // Nothing waits and nothing is on its way: this message goes first whatever its
  // priority, so send it from here and spare the wakeup of the sending thread.
  sending_ = true;
  l.unlock();
  Status s = transmit_(std::move(item));
  l.lock();
  sending_ = false;
  if (!queue_.empty() || stop_) cv_.notify_one();
  return s;
}

void SendQueue::Enqueue(Item item, int priority) {
  queue_.emplace(std::make_pair(-static_cast<int64_t>(priority), seq_++), std::move(item));
}

void SendQueue::Filter(const std::function<bool(Item*)>& keep) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    it = keep(&it->second) ? std::next(it) : queue_.erase(it);
  }
}

SendQueue::Queue::iterator SendQueue::Next() {
  if (stop_) return queue_.begin();
  std::map<int, bool> blocked;  // receivers found without credit in this scan: asked once each
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const int node = it->second.node;
    if (blocked.count(node) != 0) continue;
    if (HasCredit(it->second)) return it;
    blocked[node] = true;
  }
  return queue_.end();
}

void SendQueue::Gather(Item* first) {
  if (!gather_ || first->group.empty()) return;
  std::vector<Item> more;
  int64_t total = first->gather_bytes;
  for (auto it = queue_.begin(); it != queue_.end() && static_cast<int>(more.size()) + 1 < limits_.max_items;) {
    const Item& q = it->second;
    if (q.node != first->node || q.group != first->group || total + q.gather_bytes > limits_.max_bytes) {
      ++it;
      continue;
    }
    total += q.gather_bytes;
    more.push_back(std::move(it->second));
    it = queue_.erase(it);
  }
  if (!more.empty()) gather_(first, &more);
}

bool SendQueue::HasCredit(const Item& item) const {
  const int64_t unacked = unacked_(item.node);
  return unacked == 0 || unacked + static_cast<int64_t>(DataBytes(item.msg)) <= credit_;
}

void SendQueue::Loop() {
  for (;;) {
    std::unique_lock<std::mutex> l(mu_);
    Queue::iterator next = queue_.end();
    // While credit holds the queue back, acknowledgements wake this thread (or, without
    // them, it looks again every millisecond). The 50 ms look is a safety net: credit that
    // something else freed (a node's loss) is found anyway.
    const auto again = std::chrono::milliseconds(ack_source_ != nullptr ? 50 : 1);
    while (!(stop_ && queue_.empty())) {
      if (!sending_ && (next = Next()) != queue_.end()) break;
      if (!sending_ && !queue_.empty()) cv_.wait_for(l, again);
      else cv_.wait(l);
    }
    if (queue_.empty()) return;  // stopping, and everything is sent
    Item item = std::move(next->second);
    queue_.erase(next);
    Gather(&item);
    sending_ = true;
    l.unlock();
    const int node = item.node;
    Status s = transmit_(std::move(item));
    if (!s.ok()) LOG(WARNING) << "sending to node " << node << " failed: " << s;
    l.lock();
    sending_ = false;
  }
}

}  // namespace tally
