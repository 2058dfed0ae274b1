// The parameter server: the node that holds an fp32 master copy of its share of every key,
// sums the workers' gradient pushes and runs the optimizer on them (README.md, "Where
// things live"; the messages: docs/wire.md).
//
//   ClusterConfig cfg;                                    // role = SERVER
//   TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&cfg));
//   return RunServer(cfg, NewZmqTransport());             // until the job ends
//
// KVServer is the protocol logic alone, fed one Message at a time and answering through a
// send function, so that it can be tested with hand-made messages. It is two parts:
//   - the core (ServerCore, server_core.h): the plain step, push in, sum, update, answer,
//     with nothing of fault tolerance in it (server_core.cc, server_core_step.cc, the
//     aggregator slice_aggregator.h, step_rates.h and optim/updater.h);
//   - the layer around it, this class: it handles the messages of fault tolerance itself
//     (SERVER_LOST, REPLICATE, REPLICA_STATE, a backup's RESPONSE: kv_server_replica.cc and
//     kv_server_spare.cc; ROLLBACK and the undo copy: kv_server_rollback.cc; MEMBERSHIP_PREPARE
//     and MEMBERSHIP: kv_server_elastic.cc), hands the workers' requests to the core and
//     changes its step only through the core's hooks (CoreHooks), which it implements.
// The commands and their fields are in docs/wire.md ("Data commands"). In short:
//   SET_OPTIMIZER  the optimizer (typed config), sync or async, the worker count.
//   INIT           the initial values of slices; the server keeps them in fp32.
//   PUSH step t    gradients (f32, f16 or bf16), answered at once. Sync: once every worker's
//                  push of step t for a slice is in, their fp32 sum, taken in worker rank
//                  order, goes to the optimizer (or, with no optimizer, replaces the value).
//                  Async: each push is applied when it arrives.
//   PULL step t    the values after step t's update (t = -1: the initial values), in the
//                  dtype asked for; a sync pull waits for that update, an async one does not.
//   PUSHPULL step t  a PUSH of step t whose answer is the PULL of step t (one round trip).
//   INIT/PULL with optimizer_state: the same, for the slices' momentum (checkpoints).
//   Meta.stop      a push asking the job to stop; every answer of that step or later says so.
//   SET_LR         the learning rate of the updates of steps >= Meta.step (async: at once).
//   ROLLBACK step t  undo step t's update of the slices (weights and optimizer state), then
//                  answer as a PULL of step t: the values as before it.
// Every request gets one RESPONSE with the request's id; a malformed or out-of-place request
// gets one with `error` set and a log line, is counted (NumRefused), and changes nothing.
//
// Steps in a window (docs/wire.md, "Steps"): a PUSH, PULL or PUSHPULL of a step more than
// kStepWindow steps after a slice's last step applied (dist_async: the newest step taken) is
// refused, and so is a ROLLBACK of a step after the one being gathered: what a server keeps
// for steps to come (pushes, waiting pulls, steps to skip) stays bounded whatever a worker
// sends. A worker stays inside it by waiting for its answers: a synchronous PUSH more than
// kAnsweredAhead steps ahead is answered once the slice has caught up to kAnsweredAhead
// steps behind it, and training never pushes a step before its pull of the last one.
// Each worker has at most kMaxWaitingPerWorker requests waiting on one slice.
//
// Duplicates: a worker's push of a step counts once per slice. A second copy (a network
// duplicate or a resend) is not counted again and is answered as the first was: a PUSH at
// once, a PUSHPULL with the values after its step, or, when a later step has changed them
// since, not at all (the first answer went out then).
//
// Non-finite gradients: a sync step whose summed gradient of a slice is not finite is not
// applied to that slice (a one-line log per step), and the answers of that step say so
// (Meta.skipped). Every update keeps a one-step undo copy of the values and optimizer
// state, which the workers' ROLLBACK puts back on every other slice. Async: a non-finite
// push is not applied, and its answer says so. docs/wire.md has the whole protocol.
//
// Memory: the undo copy doubles a slice's values and optimizer state under sync, and costs
// a copy of them per update (none without an optimizer). Received gradients are kept
// without copying until their step is applied, unless their storage is shared with someone
// else (the in-process transport hands over the sender's own buffer), in which case they
// are copied first. Without an optimizer, one worker's fp32 push becomes the values as it
// is, without a copy. A pull answered in fp32 sends the master values themselves; an update
// that finds them still referenced by a pending send writes a fresh copy instead (copy on
// write).
//
// Thread-safety: KVServer is not thread-safe; RunServer feeds it from one thread. Its loops
// over big slices run on the OpenMP threads.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "net/cluster.h"
#include "net/server_chains.h"
#include "net/transport.h"
#include "profile/records.h"
#include "server/server_core.h"

namespace tally {

class KVServer : private CoreHooks {
 public:
  // Sends msg to node `id`; RunServer passes Cluster::Send.
  using SendFn = ServerCore::SendFn;

  static constexpr int64_t kStepWindow = ServerCore::kStepWindow;
  static constexpr int64_t kAnsweredAhead = ServerCore::kAnsweredAhead;
  static constexpr int kMaxWaitingPerWorker = ServerCore::kMaxWaitingPerWorker;
  // A spare still receiving its chains holds workers' requests (their ROLLBACKs) up to
  // this many, and this many bytes of data; beyond, it refuses them.
  static constexpr size_t kMaxHeld = 1 << 16;
  static constexpr size_t kMaxHeldBytes = size_t{1} << 30;

  // The job's shape: node ids 1..num_servers are servers, the next num_workers are workers,
  // then the spare servers (NodeIds).
  KVServer(int num_servers, int num_workers, SendFn send, int spare_servers = 0);
  ~KVServer() override;

  // Handles one data message (a request from a worker, or a peer's fault-tolerance
  // message) and answers it, now or, for a synchronous pull, once the step it waits for
  // has been applied.
  void Handle(Message&& msg);

  // --server-replicas (docs/faults.md): this server's rank and the replica count. Each
  // slice's INIT names its chain; as the chain's first live server, this one forwards every
  // synchronous step's summed gradient to the live servers after it (REPLICATE) and answers
  // the step's pulls and pushes once they have applied it. SERVER_LOST (from the scheduler,
  // through the data handler) stops the waiting for a lost server. When a spare takes the
  // lost server's place (--spare-servers, sync only), the server of each chain it joins
  // sends it every slice's state (REPLICA_STATE), then its steps as to any backup; the
  // spare holds the workers' requests until every chain has come, then tells the
  // scheduler (REPLICA_READY).
  void SetReplication(int my_rank, int replicas);

  // --elastic (docs/faults.md, "Elastic workers"): workers may leave. The scheduler's
  // MEMBERSHIP_PREPARE names a leaver: its pushes are refused from then on, no step is
  // applied, and the server reports how far the leaver's pushes are counted on its slices
  // (MEMBERSHIP_REPORT). The MEMBERSHIP that follows says from which step the leaver no
  // longer counts: its pushes of that step and later are forgotten, and each step waits
  // for the workers live at it. keep_lr: a step of L live workers out of the N that
  // started has its sum scaled by N / L (the mean gradient, --elastic-lr keep); otherwise
  // the sum of L is taken as it is, which scales the step by L / N (--elastic-lr linear).
  void SetElastic(bool keep_lr);

  // For tests and logs: the fp32 master values of the slice of `key` starting at `offset`
  // (undefined if unknown), and the last step applied to it (-1: none).
  Tensor Value(uint64_t key, uint64_t offset) const;
  int64_t AppliedStep(uint64_t key, uint64_t offset) const;
  // Pulls waiting for an update.
  int NumWaitingPulls() const { return core_.NumWaitingPulls(); }
  // Pushes not counted because they were duplicates.
  int64_t NumDuplicates() const { return core_.NumDuplicates(); }
  // Requests refused (answered with an error, or, from servers, logged and dropped).
  int64_t NumRefused() const { return core_.NumRefused(); }

  // The profiler: each step's record (sum and update time, requests, payload bytes in and
  // out) goes to `recorder` once a push two steps later arrives, and the rest on
  // FlushSteps. With --profile, sums and updates are trace events too.
  void SetStepRecorder(std::function<void(const profile::StepRecord&)> recorder,
                       std::function<void(int64_t step)> step_begins = nullptr);
  void FlushSteps() { core_.FlushSteps(); }

 private:
  // What this layer keeps of each slice, by ServerSlice::id: its chain (--server-replicas:
  // the rank of the server whose chain holds it, -1: none) and, while this server is its
  // primary, the steps forwarded to backups and not yet acknowledged, with the backups
  // (ranks) still owing (a step is visible, answered, once applied and acknowledged by
  // every live backup); the one-step undo copy (the values before the update of undo_step,
  // -1: none; the optimizer keeps its own copy, Updater::SaveState); and the steps rolled
  // back before their pushes were all in.
  struct Recovery {
    int chain = -1;
    std::map<int64_t, std::set<int>> owed;
    Tensor undo;
    int64_t undo_step = -1;
    std::set<int64_t> skip_when_ready;
  };
  Recovery& Of(const ServerSlice& s) { return recovery_[s.id]; }
  const Recovery& Of(const ServerSlice& s) const { return recovery_[s.id]; }

  // The core's hooks (CoreHooks), each in the file of the part it serves.
  Status AdmitPush(const Message& msg) const override;               // kv_server_elastic.cc
  Status AdmitInit(const wire::Meta& init) const override;           // kv_server.cc: the chain
  void SliceMade(const ServerSlice& s, const wire::Meta& init) override;
  const WorkerMembership* Members() const override;                  // kv_server_elastic.cc
  int64_t Visible(const ServerSlice& s) const override;              // kv_server_replica.cc
  bool AnswerPushOnceVisible() const override { return replicas_ > 0; }
  float GradientScale(int64_t step, float scale) const override;     // kv_server_elastic.cc
  bool SkipWhenReady(ServerSlice* s, int64_t step) override;         // kv_server_rollback.cc
  Tensor BeforeUpdate(ServerSlice* s, int64_t step) override;        // kv_server_rollback.cc
  void ValuesReplaced(ServerSlice* s, int64_t step, Tensor* old_values) override;
  void StepDone(ServerSlice* s, int64_t step, const Tensor& sum, float scale) override;  // replica
  void Annotate(int64_t step, wire::Meta* answer) const override;    // kv_server_elastic.cc

  // The scheduler's SERVER_LOST and servers' messages (a backup's RESPONSE, REPLICATE,
  // REPLICA_STATE): handled, or refused and counted, and true; false for anything else.
  bool HandleFromPeers(Message* msg);
  // A worker's request the core does not take: ROLLBACK.
  void HandleRequest(Message* msg);
  // Elastic workers (kv_server_elastic.cc): the scheduler's MEMBERSHIP_PREPARE and
  // MEMBERSHIP.
  void HandleMembership(const Message& msg);
  void PrepareMembership(const wire::Meta& m);
  // TALLY_TEST_DROP_PUSH (base/fault_hooks.h): a push this server loses on purpose.
  bool DroppedForTest(const wire::Meta& m);
  int64_t dropped_step_ = -1;  // the last step whose dropping was logged

  // Rollback (kv_server_rollback.cc). ROLLBACK step t: undo step t's update of the slices
  // (weights and optimizer state), then answer as a PULL of step t.
  Status HandleRollback(const Message& msg);
  // Undoes `step` on s if it is its last step applied, or skips it when it comes: s's part
  // of a ROLLBACK, and of a MEMBERSHIP whose step is skipped everywhere. Idempotent.
  // REQUIRES: s->applied <= step.
  void RollBack(ServerSlice* s, int64_t step);

  // Replication (kv_server_replica.cc). HandleReplicate: a backup applies a forwarded step;
  // HandleReplicaAck: a backup has; ServerLost: a server will never acknowledge again.
  Status HandleReplicate(Message* msg);
  void HandleReplicaAck(const Message& msg);
  // `spare` >= 0: the spare that takes the lost server's place.
  void ServerLost(int rank, int spare);
  // The live servers after this one in s's chain, when this one serves s.
  std::vector<int> Backups(const ServerSlice& s) const;
  // Sends step `step` of s (its applied fp32 sum, or that it was skipped) to the backups.
  // lr >= 0: that learning rate (a forwarded step's own) instead of the step's here.
  void Forward(ServerSlice* s, int64_t step, const Tensor& sum, float scale, float lr = -1);

  // Spares (kv_server_spare.cc). SendStates: as the server of a chain, its slices' state
  // and then the end marker, to each spare that joined the chain and has not had them.
  void SendStates();
  Message StateOf(const ServerSlice& s);
  // s changed other than by a step (a rollback): its state again to the spares that had
  // it, whose workers' copy of the rollback may have left before they knew of them.
  void ResendState(const ServerSlice& s);
  // A spare: one slice's state, or a chain's end marker (then, the last, REPLICA_READY).
  Status HandleReplicaState(Message* msg);
  Status TakeState(const Message& msg, int chain);
  // A spare: whether msg (a worker's request) waits for the chains still to come.
  bool HoldForState(Message* msg);
  // A spare not yet told it takes a place: whether msg (a server's state or step, sent by
  // one that was told first) waits for that.
  bool EarlyForSpare(Message* msg);
  // A spare told it takes `lost`'s place: awaits its chains, and takes the early messages.
  void TakePlace(int lost);

  const NodeIds ids_;  // the job's servers and workers, and their node ids
  SendFn send_;
  int my_rank_ = -1, replicas_ = 0;  // SetReplication
  ServerChains chains_;              // who holds each chain, after the losses (SERVER_LOST)
  std::set<std::pair<int, int>> sent_states_;  // (chain, spare rank) whose states went
  std::set<int> awaiting_chains_;    // a spare: the chains whose states are still to come
  std::set<int> complete_chains_;    // a spare: the chains whose states all came
  std::deque<Message> held_;         // a spare: workers' requests until awaiting_chains_ empties
  std::deque<Message> early_;        // a spare: servers' messages before its SERVER_LOST
  size_t held_bytes_ = 0;            // data bytes of held_
  bool elastic_ = false, keep_lr_ = true;  // SetElastic
  WorkerMembership members_;               // before core_: its aggregators point to it
  std::set<int> leaving_;                  // ranks named by MEMBERSHIP_PREPARE, not yet settled
  int64_t membership_epoch_ = 0;           // the last MEMBERSHIP's
  std::vector<Recovery> recovery_;  // by slice id (SliceMade, TakeState)
  ServerCore core_;  // last: its hooks are this object's, whose state is above
};

// What a server's caller may watch (the profiler): `joined` once the node has joined (its
// rank is known), `step` with each step's record (KVServer::SetStepRecorder), `ending`
// when the job has ended, while the cluster is still there. Each may be empty.
struct ServerObserver {
  std::function<void(const Cluster&)> joined;
  std::function<void(const profile::StepRecord&)> step;
  std::function<void(int64_t step)> step_begins;  // the first request of a step arrived
  std::function<void(const Cluster&)> ending;
};

// How the job treats its workers: --elastic and --elastic-lr (KVServer::SetElastic).
struct ElasticOptions {
  bool elastic = false;
  bool keep_lr = true;  // --elastic-lr keep; false: linear
};

// Joins the job as a server, serves data messages on one thread until the scheduler ends
// the job, and returns Ok then; returns the failure if a node dies or joining fails.
// REQUIRES: cfg.role == wire::SERVER.
Status RunServer(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
                 const ServerObserver& observer = ServerObserver(), const ElasticOptions& elastic = ElasticOptions());

}  // namespace tally
