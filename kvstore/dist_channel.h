// DistChannel: what the worker's DistKVStore (dist_kvstore.h) sends and hears, internal to
// kvstore/. The request layer (Requests, net/requests.h) numbers the requests, queues them by
// priority and send credit, gathers small ones, matches answers and lets the store wait; the
// chain router (ChainRouter, chain_router.h) says which server serves a slice now. What is
// left here is the kvstore's: which answers carry values, the skipped steps and the stop
// flag the answers report, and the SERVER_LOST notices that the router and the layer act on.
//
//   auto channel = std::make_shared<DistChannel>(cluster, /*spares_take_places=*/true);
//   cluster->SetDataHandler([channel](Message&& m) { channel->OnMessage(std::move(m)); });
//   channel->Start();
//   PendingRequest p;
//   p.command = wire::PUSH;
//   p.key = key;
//   p.keep = push.data;                    // alive until answered
//   channel->EnqueueToChain(slice.server, std::move(push), /*priority=*/-key, std::move(p));
//   TALLY_RETURN_IF_ERROR(channel->WaitAll(kDistWaitTimeoutMs));
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
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "kvstore/chain_router.h"
#include "kvstore/kvstore.h"
#include "kvstore/membership_view.h"
#include "kvstore/placement.h"
#include "kvstore/trainer_hooks.h"
#include "net/cluster.h"
#include "net/requests.h"

namespace tally {

// The optimizer's settings as SET_OPTIMIZER carries them (docs/wire.md).
wire::OptimizerConfig ToWireOptimizer(const OptimizerConfig& c);

class DistChannel {
 public:
  // spares_take_places: false under dist_async (ServerLost).
  explicit DistChannel(Cluster* cluster, bool spares_take_places = true);

  // Starts the sending thread.
  void Start() { requests_.Start(); }
  // Sends what is queued, then ends the sending thread.
  void Stop() { requests_.Stop(); }

  // Queues msg for node `node`; its request id is filled in. Higher priority goes first.
  void Enqueue(int node, Message msg, int priority, PendingRequest pending) {
    requests_.Send(node, std::move(msg), priority, std::move(pending));
  }
  // Enqueue to the server now serving chain `chain` (the rank of the server whose slice
  // msg's is): the chain's first live holder, and again its next should that one be lost.
  void EnqueueToChain(int chain, Message msg, int priority, PendingRequest pending) {
    pending.chain = chain;
    requests_.Send(router_.Route(chain), std::move(msg), priority, std::move(pending));
  }
  // The ranks of the servers holding server `rank`'s slices, the serving one first.
  std::vector<int> Holders(int server_rank) const { return router_.Holders(server_rank); }

  // The cluster's data handler and failure callback.
  void OnMessage(Message&& m);
  void OnFailure(const Status& s) {
    requests_.Fail(s);
    {
      std::lock_guard<std::mutex> l(membership_mu_);
      if (failure_.ok()) failure_ = s;
    }
    membership_cv_.notify_all();
  }
  // Waits until every queued request has been answered. Returns the cluster's failure,
  // the first error answered or met sending since the last call, or Unavailable after
  // timeout_ms.
  Status WaitAll(int timeout_ms) { return requests_.WaitAll(timeout_ms); }
  // Waits until every request queued so far for `key` (its PUSH, PULL, PUSHPULL or
  // ROLLBACK) has been answered: its pulled values are in, its pushed buffers free. Returns
  // the cluster's failure, or Unavailable after timeout_ms; errors answered are left for
  // WaitAll to report.
  Status WaitKey(uint64_t key, int timeout_ms) { return requests_.WaitKey(key, timeout_ms); }
  // A server lost under --server-replicas (SERVER_LOST, which OnMessage passes here):
  // requests queued for it or unanswered by it go to the next live server of its chain
  // (the same request ids: the servers count each push once); copies for it as a backup,
  // and requests that only a live server needs (INIT, SET_LR), are dropped.
  // spare >= 0: the spare that takes its place in its chains (unless dist_async, where
  // spares take no place: spares_take_places false).
  void ServerLost(int server_rank, int spare = -1);

  // Whether an answer has carried Meta.stop: some worker asked the job to stop.
  bool stop_seen() const { return stop_seen_.load(); }
  // Whether an answer (not a ROLLBACK's) since the last call said that its step was
  // skipped for a non-finite gradient (Meta.skipped); *out: that step, the lowest key
  // answered so of it, and the workers the servers named.
  bool TakeSkip(KVStore::SkippedStep* out);
  // µs spent copying pulled values in since the last call (the profiler's pull time).
  int64_t TakePullMicros() { return pull_us_.exchange(0); }
  // --elastic: the last MEMBERSHIP taken in (epoch 0: none), and the workers the latest
  // answer's values summed as its server said (0: none said so).
  MembershipView::Membership membership() const {
    std::lock_guard<std::mutex> l(membership_mu_);
    return membership_;
  }
  int summed_workers() const { return summed_workers_.load(); }
  // Every MEMBERSHIP taken in, by epoch, once every epoch an answer named (RESPONSE's
  // membership_epoch) is among them: all the changes the answers so far were decided
  // under. Returns the cluster's failure, or Unavailable after timeout_ms.
  Status HeardMembership(std::vector<MembershipView::Membership>* out, int timeout_ms);
  // A worker that joined the running job after membership epoch `after`
  // (Cluster::joined_after_epoch): waits for the first later MEMBERSHIP naming worker
  // `rank` live and gives its from_step, the step of the worker's first push. Returns the
  // cluster's failure, or Unavailable after timeout_ms.
  // A server refuses a pull more than 4 steps past its slice's last step applied
  // (docs/wire.md, "Steps"), and a slice is at most one step behind another (the pushes of
  // step t + 1 wait for every pull of step t): with `applied` the newest step some slice had
  // applied, every slice takes a pull of applied + 3. A join replayed from a file
  // (--membership-replay) may start further on: pulls of `key`'s `slices`, each answered
  // once its step is applied, move that reach on by 3 until `step` is within it.
  Status ReachStep(int key, const std::vector<Placement::Slice>& slices, int64_t applied, int64_t step,
                   int timeout_ms);
  // The lead tells worker `rank`, which joins at step `step`, the loss scale (LOSS_SCALE).
  Status TellLossScale(int rank, int64_t step, const TrainerHooks::LossScaleState& state);
  // LOSS_SCALE from worker `teller` for step `step`: waits for it (a joiner's first step);
  // one from another worker is refused (net/command_rules.h, CheckLossScaleTeller).
  // Returns the cluster's failure, or Unavailable after timeout_ms.
  Status LossScaleFor(int64_t step, int teller, int timeout_ms, TrainerHooks::LossScaleState* out);
  // *applied: the change's applied_max, the newest step a slice had applied when it was
  // decided (-1: none said).
  Status JoinedFrom(int rank, int64_t after, int timeout_ms, int64_t* from_step, int64_t* applied);

 private:
  // Records a RESPONSE's Meta.skipped for TakeSkip.
  void NoteSkip(const wire::Meta& meta, uint64_t key);

  Cluster* const cluster_;
  ChainRouter router_;
  std::atomic<int64_t> pull_us_{0};
  std::atomic<bool> stop_seen_{false};
  std::mutex skip_mu_;
  KVStore::SkippedStep skip_;  // GUARDED_BY(skip_mu_); step -1: none since the last TakeSkip
  mutable std::mutex membership_mu_;
  std::condition_variable membership_cv_;
  MembershipView::Membership membership_;  // GUARDED_BY(membership_mu_); epoch 0: none heard of
  std::vector<MembershipView::Membership> changes_;  // GUARDED_BY(membership_mu_); by epoch
  std::map<int64_t, int64_t> applied_;        // GUARDED_BY(membership_mu_); a join's applied_max, by epoch
  // GUARDED_BY(membership_mu_); the last LOSS_SCALE of each sender (node id): (step, state)
  std::map<int, std::pair<int64_t, TrainerHooks::LossScaleState>> scales_;
  int64_t answered_epoch_ = 0;                // GUARDED_BY(membership_mu_); the highest named
  Status failure_;                            // GUARDED_BY(membership_mu_)
  std::atomic<int> summed_workers_{0};
  // Last: destroyed first, its sending thread ended while the router is alive.
  Requests requests_;
};

}  // namespace tally
