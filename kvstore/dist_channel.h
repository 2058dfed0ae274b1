// DistChannel: the request/answer machinery of DistKVStore (dist_kvstore.h), internal to
// kvstore/. It numbers requests, hands them to its SendQueue (net/send_queue.h: priority
// order within a send credit per server, sent from the caller's thread when nothing waits),
// matches answers (on the cluster's receive thread) to what they complete, copies pulled
// values into their destination, and lets the store's thread wait for everything
// outstanding. Small requests waiting in the queue for one server leave together, as one
// request of several slices (docs/wire.md, "Several slices in one request"): a round trip
// per server instead of one per key for a model's many small arrays.
//
// Credit: a request leaves only while less than the credit (SendCreditBytes: 64 MB over the
// job's workers, who share each server's link, at least 1 MB) of what was sent to its server
// is unacknowledged by the server's transport; the rest waits in the priority queue, where
// the first layers' requests overtake the backlog of the last layers' (what lets the next
// forward pass start before every pull is in). Receipt, not the answer, frees credit: an
// answer of a synchronous step waits for the other workers, which may be waiting for credit
// in turn.
//
// Ownership: held by shared_ptr, also by the callbacks given to the Cluster, so that an
// answer or failure notice arriving late finds it alive. Thread-safety: all methods may be
// called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "kvstore/kvstore.h"
#include "net/cluster.h"
#include "net/send_queue.h"
#include "net/server_chains.h"

namespace tally {

// A Pull of one key: its slices' answers land in `flat` (outs[0] seen as 1-D); once every
// slice is in, `flat` is copied into `others` (the other devices' outputs).
struct PullOp {
  Tensor flat;
  std::vector<Tensor> others;
  std::atomic<int> remaining{0};
};

// What a request's answer completes.
struct PendingRequest {
  wire::Command command = wire::COMMAND_UNKNOWN;
  uint64_t key = 0;
  int node = 0;
  std::vector<Tensor> keep;     // the request's data frames, alive until answered
  std::shared_ptr<PullOp> pull;  // PULL, PUSHPULL, ROLLBACK: where the values go (ROLLBACK: may be null)
  int64_t offset = 0, length = 0;
  // --server-replicas: a copy for a backup of the slice's server (a push or rollback it
  // applies too), dropped if that server is lost; and the request itself, which goes again
  // to the next server of the chain when the one it went to is lost.
  bool replica_copy = false;
  Message request;
  // The rank of the server whose slice this is (its chain): a request, not a copy, goes
  // again to the chain's serving server when the node it went to is lost. -1: none.
  int chain = -1;
};

class DistChannel {
 public:
  // spares_take_places: false under dist_async (ServerLost).
  explicit DistChannel(Cluster* cluster, bool spares_take_places = true);

  // Starts the sending thread.
  void Start();
  // Sends what is queued, then ends the sending thread.
  void Stop();

  // Queues msg for node `node`; its request id is filled in. Higher priority goes first.
  void Enqueue(int node, Message msg, int priority, PendingRequest pending);
  // The cluster's data handler and failure callback.
  void OnMessage(Message&& m);
  void OnFailure(const Status& s);
  // Waits until every queued request has been answered. Returns the cluster's failure,
  // the first error answered or met sending since the last call, or Unavailable after
  // timeout_ms.
  Status WaitAll(int timeout_ms);
  // Waits until every request queued so far for `key` (its PUSH, PULL, PUSHPULL or
  // ROLLBACK) has been answered: its pulled values are in, its pushed buffers free. Returns
  // the cluster's failure, or Unavailable after timeout_ms; errors answered are left for
  // WaitAll to report.
  Status WaitKey(uint64_t key, int timeout_ms);
  // A server lost under --server-replicas (SERVER_LOST, which OnMessage passes here):
  // requests queued for it or unanswered by it go to the next live server of its chain
  // (the same request ids: the servers count each push once); copies for it as a backup,
  // and requests that only a live server needs (INIT, SET_LR), are dropped.
  // spare >= 0: the spare that takes its place in its chains (unless dist_async, where
  // spares take no place: spares_take_places false).
  void ServerLost(int server_rank, int spare = -1);
  // Enqueue to the server now serving chain `chain` (the rank of the server whose slice
  // msg's is): the chain's first live holder, and again its next should that one be lost.
  void EnqueueToChain(int chain, Message msg, int priority, PendingRequest pending);
  // The ranks of the servers holding server `rank`'s slices, the serving one first.
  std::vector<int> Holders(int server_rank) const;
  // Whether an answer has carried Meta.stop: some worker asked the job to stop.
  bool stop_seen() const { return stop_seen_.load(); }
  // Whether an answer (not a ROLLBACK's) since the last call said that its step was
  // skipped for a non-finite gradient (Meta.skipped); *out: that step, the lowest key
  // answered so of it, and the workers the servers named.
  bool TakeSkip(KVStore::SkippedStep* out);
  // µs spent copying pulled values in since the last call (the profiler's pull time).
  int64_t TakePullMicros() { return pull_us_.exchange(0); }

 private:
  // The queue's Gather hook: adds the slices and data frames of `more` (small requests to
  // first's server) to first, and records their ids; REQUIRES: mu() held.
  void Gather(SendQueue::Item* first, std::vector<SendQueue::Item>* more);
  // The queue's Transmit hook: sends out; a failure finishes its request (all of a gathered
  // one's) with the error.
  Status Send(SendQueue::Item&& out);
  std::mutex& mu() const { return queue_.mu(); }
  // The request ids an answer to request `id` completes: its own, or those gathered in it.
  std::vector<uint64_t> Gathered(uint64_t id);
  // Completes one slice of an answer: copies pulled values in (slice i of m) and finishes
  // request `id`.
  void Complete(uint64_t id, const PendingRequest& p, const Message& m, int i);
  void Finish(uint64_t id, const Status& s);
  // Records a RESPONSE's Meta.skipped for TakeSkip.
  void NoteSkip(const wire::Meta& meta, uint64_t key);

  // ServerLost's reroute of one queued or unanswered request to a lost node; true: dropped
  // (finish it). REQUIRES: mu() held.
  bool Redirect(PendingRequest* p, int* node);
  int RouteLocked(int server_rank) const;  // REQUIRES: mu() held

  Cluster* const cluster_;
  const bool spares_take_places_;
  ServerChains chains_;  // GUARDED_BY(mu())
  std::atomic<int64_t> pull_us_{0};
  std::condition_variable done_cv_;  // pending_ emptied, or a failure
  std::map<uint64_t, PendingRequest> pending_;              // GUARDED_BY(mu())
  // Unanswered requests per key (the commands WaitKey waits for), and the key WaitKey is
  // waiting for (-1: none), so that Finish wakes it only when that key is done.
  std::map<uint64_t, int> key_pending_;                      // GUARDED_BY(mu())
  int64_t waited_key_ = -1;                                  // GUARDED_BY(mu())
  // Requests sent together: the id the message carries -> every id in it, in slice order.
  std::map<uint64_t, std::vector<uint64_t>> gathered_;      // GUARDED_BY(mu())
  uint64_t next_id_ = 1;                                    // GUARDED_BY(mu())
  Status error_;                                            // GUARDED_BY(mu())
  Status failure_;                                          // GUARDED_BY(mu())
  // The last request Enqueue sent itself: whether it was small, and when it had gone.
  bool last_direct_small_ = false;                          // GUARDED_BY(mu())
  std::chrono::steady_clock::time_point last_direct_end_;  // GUARDED_BY(mu())
  std::atomic<bool> stop_seen_{false};
  KVStore::SkippedStep skip_;  // GUARDED_BY(mu()); step -1: none since the last TakeSkip
  // Last: destroyed first, its sending thread ended while the hooks' state is alive.
  SendQueue queue_;
};

}  // namespace tally
