#include "net/priority_sender.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include <glog/logging.h>

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

PrioritySender::PrioritySender(Cluster* cluster, int64_t credit)
    : cluster_(cluster), credit_(credit), thread_([this] { Loop(); }) {}

PrioritySender::~PrioritySender() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool HasSendCredit(const Cluster& cluster, int id, int64_t bytes, int64_t credit) {
  const int64_t unacked = cluster.UnacknowledgedBytes(id);
  return unacked == 0 || unacked + bytes <= credit;
}

PrioritySender::Queue::iterator PrioritySender::Next() {
  return stop_ ? queue_.begin() : FirstWithCredit(queue_, *cluster_, credit_);
}

Status PrioritySender::Send(int id, Message msg, int priority) {
  std::unique_lock<std::mutex> l(mu_);
  if (queue_.empty() && !sending_ && HasSendCredit(*cluster_, id, static_cast<int64_t>(DataBytes(msg)), credit_)) {
    sending_ = true;
    l.unlock();
    Status s = cluster_->Send(id, std::move(msg));
    l.lock();
    sending_ = false;
    const bool more = !queue_.empty();
    l.unlock();
    if (more) cv_.notify_one();
    return s;
  }
  queue_.emplace(std::make_pair(-static_cast<int64_t>(priority), seq_++), Queued{id, std::move(msg)});
  l.unlock();
  cv_.notify_one();
  return Status::Ok();
}

void PrioritySender::Loop() {
  for (;;) {
    std::unique_lock<std::mutex> l(mu_);
    Queue::iterator next = queue_.end();
    // Acknowledgements free credit without a word to this thread: while credit holds the
    // queue back, look again every millisecond.
    while (!(stop_ && queue_.empty())) {
      if (!sending_ && (next = Next()) != queue_.end()) break;
      if (!sending_ && !queue_.empty()) cv_.wait_for(l, std::chrono::milliseconds(1));
      else cv_.wait(l);
    }
    if (queue_.empty()) return;  // stopping, and everything is sent
    Queued q = std::move(next->second);
    queue_.erase(next);
    sending_ = true;
    l.unlock();
    Status s = cluster_->Send(q.node, std::move(q.msg));
    if (!s.ok()) LOG(WARNING) << "sending to node " << q.node << " failed: " << s;
    l.lock();
    sending_ = false;
    l.unlock();
    cv_.notify_one();
  }
}

}  // namespace tally
