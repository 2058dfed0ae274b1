// PrioritySender: sends a node's messages highest priority first, letting into each
// connection only a credit of unacknowledged bytes, so that a backlog waits here, where
// priorities still apply, rather than in the connection, where they no longer do. A server
// answers through one: the first layers' weights, which the workers' next forward pass
// needs first, overtake the answers of the last layers' queued behind a loaded link.
//
//   PrioritySender sender(cluster, SendCreditBytes(cluster->num_workers()));
//   sender.Send(worker_id, std::move(answer), answer.meta.priority());
//
// A message goes at once, from the caller's thread, when nothing waits and its receiver
// has credit; else a sending thread sends it when its turn and the credit come
// (acknowledgements free credit: Cluster::UnacknowledgedBytes). Messages to one receiver
// may leave out of call order (higher priority first); the transport numbers them as they
// leave. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

#include "net/cluster.h"

namespace tally {

// The credit per connection when `sharers` connections share the busiest link (a server's:
// every worker sends to it and hears from it): 64 MB over them, at least 1 MB, so that the
// queue before that link holds about 64 MB whatever the job's size (20 ms at 25 Gb/s); or
// TALLY_SEND_CREDIT_KB (a warning names a bad value).
int64_t SendCreditBytes(int sharers);

// Whether `bytes` more may go to node `id` now: less than `credit` of what was sent to it is
// unacknowledged (at least one message always may go).
bool HasSendCredit(const Cluster& cluster, int id, int64_t bytes, int64_t credit);

// The first entry of a queue in priority order whose receiver has credit for it, or
// queue.end(). An entry (the map's value) has `node`, its receiver, and `msg`. Asks each
// receiver once per scan.
template <typename Queue>
typename Queue::iterator FirstWithCredit(Queue& queue, const Cluster& cluster, int64_t credit) {
  std::map<int, bool> blocked;  // receivers found without credit in this scan
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const int node = it->second.node;
    if (blocked.count(node) != 0) continue;
    if (HasSendCredit(cluster, node, static_cast<int64_t>(DataBytes(it->second.msg)), credit)) return it;
    blocked[node] = true;
  }
  return queue.end();
}

class PrioritySender {
 public:
  PrioritySender(Cluster* cluster, int64_t credit);
  // Sends what is still queued, whatever the credit, then stops the sending thread.
  ~PrioritySender();

  // Sends msg to node id now or once its turn comes. A failure of a send made now is
  // returned; one made later is logged (the receiver's failure is the heartbeat's business).
  Status Send(int id, Message msg, int priority);

 private:
  struct Queued {
    int node;
    Message msg;
  };
  // Ordered by (-priority, call order): begin() is the next to send.
  using Queue = std::map<std::pair<int64_t, uint64_t>, Queued>;
  // The first queued message that may go now (every one once stopping), or queue_.end();
  // REQUIRES: mu_ held.
  Queue::iterator Next();
  void Loop();

  Cluster* const cluster_;
  const int64_t credit_;
  std::mutex mu_;
  std::condition_variable cv_;
  Queue queue_;           // GUARDED_BY(mu_)
  uint64_t seq_ = 0;      // GUARDED_BY(mu_)
  bool sending_ = false;  // GUARDED_BY(mu_): a message is on its way out of this sender
  bool stop_ = false;     // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace tally
