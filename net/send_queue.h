// SendQueue: the queue inside the request layer (net/requests.h), used only through it: a
// node's outgoing messages, highest priority first, each connection let in only a credit of
// unacknowledged bytes, so that a backlog waits here, where priorities still apply, rather
// than in the connection, where they no longer do. Requests puts a worker's requests and a
// server's answers through it alike (the first layers' weights, which the workers' next
// forward pass needs first, overtake the answers of the last layers' queued behind a
// loaded link).
//
//   SendQueue queue(unacked, credit, transmit, gather, limits, "sender");  // Requests' hooks
//   queue.Start();
//   std::unique_lock<std::mutex> l(queue.mu());
//   Status s = queue.Send(l, std::move(item), priority);
//
// A message goes at once, from the caller's thread, when nothing waits, nothing is on its
// way and its receiver has credit; else the queue's sending thread sends it when its turn
// and the credit come. Acknowledgements free credit (Cluster::UnacknowledgedBytes) without
// a word to this class; the Cluster's acknowledgement listener wakes the sending thread
// (WakeOnAcknowledgements). Messages to one
// receiver may leave out of call order (higher priority first); the transport numbers them
// as they leave.
//
// Gathering: queued items to one node with the same non-empty `group` may leave as one
// message; the owner's Gather hook folds them in (the worker's small requests: one round
// trip per server instead of one per key, docs/wire.md "Several slices in one request").
//
// Locking: mu() guards the queue, and an owner may guard its own state with it too, to
// change that state and the queue in one step (Requests: a request's record and its place
// in the queue). The hooks run on the sending thread: Gather with mu() held,
// Transmit without it, one message at a time. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/cluster.h"

namespace tally {

// The credit per connection when `sharers` connections share the busiest link (a server's:
// every worker sends to it and hears from it): 64 MB over them, at least 1 MB, so that the
// queue before that link holds about 64 MB whatever the job's size (20 ms at 25 Gb/s); or
// TALLY_SEND_CREDIT_KB (a warning names a bad value).
int64_t SendCreditBytes(int sharers);

class SendQueue {
 public:
  struct Item {
    int node = 0;
    Message msg;
    // Non-empty: items to the same node with the same group may travel together (Gather);
    // empty: this item travels alone.
    std::string group;
    // The bytes this item adds to a gathered message (the owner's measure, its limits).
    int64_t gather_bytes = 0;
    // The owner's mark: an item that is none of its requests (Requests::Post).
    bool posted = false;
  };
  // Data bytes sent to a node and not acknowledged yet (Cluster::UnacknowledgedBytes).
  using UnackedFn = std::function<int64_t(int node)>;
  // Sends one message (gathered already); returns the send's failure.
  using TransmitFn = std::function<Status(Item&&)>;
  // Folds `more` (queued items of first's node and group, in priority order, within the
  // limits below) into `first`, which leaves next. Called only when `more` is not empty.
  using GatherFn = std::function<void(Item* first, std::vector<Item>* more)>;
  struct GatherLimits {
    int max_items = 1;      // in one message, `first` included
    int64_t max_bytes = 0;  // of gather_bytes in one message
  };

  // A message may go to a node while less than `credit` bytes sent to it are unacknowledged
  // (at least one always may). gather: null, or the hook that folds queued items into the
  // one leaving; thread_name: the sending thread's name in traces, or null.
  SendQueue(UnackedFn unacked, int64_t credit, TransmitFn transmit, GatherFn gather, GatherLimits limits,
            const char* thread_name);
  // Stop(), if not called yet.
  ~SendQueue();

  // Starts the sending thread; until then Send queues what it does not send at once.
  void Start();
  std::mutex& mu() const { return mu_; }

  // Sends item now from the caller's thread if `may_go_now`, nothing is queued or on its
  // way, and its node has credit; else queues it. Returns the failure of a send made now
  // (one made later is the Transmit hook's, or logged); *sent_now: whether it went now.
  // REQUIRES: l holds mu(); it is released while sending and held again on return.
  Status Send(std::unique_lock<std::mutex>& l, Item item, int priority, bool may_go_now = true,
              bool* sent_now = nullptr);
  // Queues item, whatever the credit; call Wake() once mu() is released. REQUIRES: mu() held.
  void Enqueue(Item item, int priority);
  // Calls keep(item) for every queued item in priority order; those it returns false for
  // leave the queue unsent. It may change an item's node and message. REQUIRES: mu() held.
  void Filter(const std::function<bool(Item*)>& keep);
  // Tells the sending thread that the queue or the credit changed. REQUIRES: mu() not held.
  void Wake();
  // Wakes the sending thread whenever `cluster` hears acknowledgements (Cluster::
  // AddAckListener), so that credit freed lets the queue go on at once; without it the
  // thread looks again every millisecond while credit holds the queue back. Once, before
  // Start; the queue stops listening when it is destroyed (cluster must outlive it).
  void WakeOnAcknowledgements(Cluster* cluster);

  // Sends what is still queued, whatever the credit, then ends the sending thread (from the
  // caller's thread if it was never started). REQUIRES: mu() not held.
  void Stop();

 private:
  // Ordered by (-priority, call order): begin() is the next to send.
  using Queue = std::map<std::pair<int64_t, uint64_t>, Item>;
  void Loop();
  // The first queued item that may go now (every one once stopping), or queue_.end().
  // REQUIRES: mu_ held.
  Queue::iterator Next();
  // Takes from the queue the items that may travel with first and hands them to gather_.
  // REQUIRES: mu_ held.
  void Gather(Item* first);
  bool HasCredit(const Item& item) const;

  const UnackedFn unacked_;
  const int64_t credit_;
  const TransmitFn transmit_;
  const GatherFn gather_;
  const GatherLimits limits_;
  const char* const thread_name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // queue_ grew, sending_ ended, stop_, or Wake()
  Queue queue_;                 // GUARDED_BY(mu_)
  uint64_t seq_ = 0;            // GUARDED_BY(mu_)
  // A message is on its way out (from the sending thread, or from Send on the caller's):
  // one at a time, so that messages to a node leave in queue order.
  bool sending_ = false;  // GUARDED_BY(mu_)
  bool stop_ = false;     // GUARDED_BY(mu_)
  std::thread thread_;
  Cluster* ack_source_ = nullptr;  // WakeOnAcknowledgements'
  int ack_key_ = -1;
};

}  // namespace tally
