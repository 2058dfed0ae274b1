// ServerCore: the parameter server's plain step, with nothing of fault tolerance in it. It
// holds the fp32 master values of its slices, takes the workers' pushes, sums them, runs the
// optimizer and answers (README.md, "Where things live"; the commands: docs/wire.md).
//
//   ServerCore core(NodeIds{/*num_servers=*/1, /*num_workers=*/2}, send);
//   core.Handle(std::move(set_optimizer));  // SET_OPTIMIZER, INIT, SET_LR from worker 0
//   core.Handle(std::move(push));           // PUSH of step t from each worker: once all are
//                                           // in, the sum is applied and the pulls answered
//   core.Handle(std::move(pull));           // PULL of step t: answered after that update
//
// The plain synchronous step, in order: Handle admits the request (AdmitRequest), HandlePush
// hands each slice's push to its aggregator (slice_aggregator.h), ApplyReadySteps takes a
// step whose pushes are all in, Apply sums them and runs the updater (optim/updater.h) with
// the step's learning rate (step_rates.h), and AnswerVisible answers the pulls waiting for
// it (AnswerPull). dist_async: each push is applied when it comes.
//
// Fault tolerance is a layer around this class (KVServer, server.h): it handles the
// messages of replication, spares, rollback and elastic membership itself and changes the
// step only through CoreHooks, whose defaults are a plain server's.
//
// Thread-safety: none; one thread feeds it. Its loops over big slices run on OpenMP threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/node_ids.h"
#include "net/transport.h"
#include "optim/updater.h"
#include "profile/records.h"
#include "server/slice_aggregator.h"
#include "server/step_rates.h"

namespace tally {

// One slice of a key held here, and a request waiting for a step of its slices.
struct ServerSlice;
struct PendingPull;

// What the layers around the core decide in its step (server.h). The defaults are a plain
// server's: every worker counts, a step is answered once applied, nothing is kept to undo.
class CoreHooks {
 public:
  virtual ~CoreHooks() = default;
  // A worker's PUSH or PUSHPULL, before its slices are looked at: Ok, or why it is refused.
  virtual Status AdmitPush(const Message& /*msg*/) const { return Status::Ok(); }
  // INIT's fields that are the layer's, before any slice is made; then each slice made.
  virtual Status AdmitInit(const wire::Meta& /*init*/) const { return Status::Ok(); }
  virtual void SliceMade(const ServerSlice& /*s*/, const wire::Meta& /*init*/) {}
  // The workers each step of a new slice's aggregator waits for (null: all, always).
  virtual const WorkerMembership* Members() const { return nullptr; }
  // The last step of s that may be answered (at most its last step applied).
  virtual int64_t Visible(const ServerSlice& s) const;
  // Sync: whether a PUSH is answered only once its step is visible, rather than at once.
  virtual bool AnswerPushOnceVisible() const { return false; }
  // The gradient scale the update of a synchronous step divides out, given the pushes'.
  virtual float GradientScale(int64_t /*step*/, float scale) const { return scale; }
  // Sync: whether `step`, its pushes all in, is skipped instead of applied.
  virtual bool SkipWhenReady(ServerSlice* /*s*/, int64_t /*step*/) { return false; }
  // Sync, before an update writes s->value, and, without an optimizer, once the sum has
  // replaced the values (*old_values: those it replaced). BeforeUpdate may move the values
  // away to keep them (an undo copy) and put another buffer of the slice's size in
  // s->value: it returns them, and the update reads them there and writes s->value
  // (Updater::UpdateKeepingUndo). Undefined: the update is in place.
  virtual Tensor BeforeUpdate(ServerSlice* /*s*/, int64_t /*step*/) { return Tensor(); }
  virtual void ValuesReplaced(ServerSlice* /*s*/, int64_t /*step*/, Tensor* /*old_values*/) {}
  // Sync: `step` of s is applied or skipped (sum undefined when skipped).
  virtual void StepDone(ServerSlice* /*s*/, int64_t /*step*/, const Tensor& /*sum*/, float /*scale*/) {}
  // Sync: the answer of a pull of `step` (>= 0), its values in, before it leaves.
  virtual void Annotate(int64_t /*step*/, wire::Meta* /*answer*/) const {}
};

struct ServerSlice {
  int id = 0;  // the Updater's key for its optimizer state, and the layers' (dense from 0)
  uint64_t key = 0, offset = 0;
  int64_t length = 0;
  Tensor value;  // fp32 master values
  int64_t applied = -1;
  int64_t newest = -1;  // async: the newest step of any push taken, applied or not
  // The first step whose push asked the job to stop (Meta.stop); INT64_MAX: none.
  int64_t stop_from = INT64_MAX;
  // Its pushes, gathered (sync) or remembered (async), and their sum.
  SliceAggregator pushes;
  std::vector<std::shared_ptr<PendingPull>> waiting;
  // Non-finite gradients (sync). `skipped`: the last step skipped here, its sum not finite
  // (or skipped by a layer); answers of that step say so. nonfinite_ranks: the workers whose
  // own push of it was not finite (empty: the sum overflowed, or a layer skipped it).
  int64_t skipped = -1;
  std::vector<int> nonfinite_ranks;
};

struct PendingPull {
  wire::Meta request;
  std::vector<ServerSlice*> slices;
  int64_t step = 0;   // answered once every slice has this step visible (request.step(),
                      // or for a PUSH held back, the step it waits for)
  int remaining = 0;  // slices whose update of `step` is still to come
  bool push_not_applied = false;  // dist_async PUSHPULL: its push was not finite, not applied
  bool push_only = false;  // a sync PUSH answered once visible: without data
};

class ServerCore {
 public:
  // Sends msg to node `id`.
  using SendFn = std::function<Status(int id, Message msg)>;

  static constexpr int64_t kStepWindow = 4;
  static constexpr int64_t kAnsweredAhead = 2;
  static constexpr int kMaxWaitingPerWorker = 16;

  // hooks: null, or the layer's (it outlives the core).
  ServerCore(NodeIds ids, SendFn send, CoreHooks* hooks = nullptr);

  // A worker's SET_OPTIMIZER, INIT, SET_LR, PUSH, PULL or PUSHPULL: handled and answered,
  // now or once the step it waits for is visible; or refused (Refuse).
  void Handle(Message&& msg);
  // Checks a worker's request before anything changes: well formed, from a worker, and for
  // a request of a step (window > 0: PUSH, PULL, PUSHPULL; a layer's ROLLBACK), its slices
  // held here, its step at most `window` steps after their last and room for its sender to
  // wait on them.
  Status AdmitRequest(const Message& msg, int64_t window);
  // Counts, logs and answers a refused request with its error.
  void Refuse(const wire::Meta& m, const Status& why);

  // The step's parts a layer drives too. ApplyReadySteps: applies every step of s whose
  // pushes are all in, in step order, then answers the pulls waiting for them. Apply: the
  // sum of grads (in their order) applied to s through the optimizer with the learning
  // rate of `step` (lr >= 0: that one) or, without an optimizer, made the values; sync, a
  // sum not finite is skipped instead. Returns the fp32 sum.
  void ApplyReadySteps(ServerSlice* s);
  Tensor Apply(ServerSlice* s, const std::vector<Tensor>& grads, int64_t step, float scale, float lr = -1);
  // Marks `step` skipped on s: its answers say so and name the workers given.
  void Skip(ServerSlice* s, int64_t step, const std::vector<int>& nonfinite_ranks);
  // The one log line of a skipped step (per worker rank under async; rank -1 under sync).
  void LogSkip(int64_t step, int rank, const std::string& why);
  // Answers the pulls (and deferred pushes) of s whose step is now visible.
  void AnswerVisible(ServerSlice* s);
  // A pull (PULL, or the PULL a ROLLBACK is answered as): answered now or once visible.
  Status HandlePull(const Message& msg, bool push_not_applied = false, bool push_only = false);
  void Respond(const wire::Meta& request, const std::string& error, bool not_applied = false);

  // The slices: each of msg's, checked to be held here with the stored length.
  Status FindSlices(const Message& msg, std::vector<ServerSlice*>* out);
  ServerSlice* Find(uint64_t key, uint64_t offset) const;
  // A slice by (key, offset), made empty (id set) if it is not held yet.
  ServerSlice* Slot(uint64_t key, uint64_t offset);
  const std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<ServerSlice>>& slices() const { return slices_; }

  const NodeIds& ids() const { return ids_; }
  bool async() const { return async_; }
  Updater* updater() const { return updater_.get(); }
  float LearningRate(int64_t step) const { return lr_.For(step); }
  // A slice has changed by a step: the optimizer can no longer change, nor INIT come.
  void MarkPushed() { pushed_ = true; }
  void CountRefused() { ++refused_; }
  int64_t NumRefused() const { return refused_; }
  int64_t NumDuplicates() const { return duplicates_; }
  int NumWaitingPulls() const { return num_waiting_; }

  // The profiler (KVServer::SetStepRecorder): NoteRequest counts a request's step load.
  void SetStepRecorder(std::function<void(const profile::StepRecord&)> recorder,
                       std::function<void(int64_t step)> step_begins);
  void NoteRequest(const Message& msg);
  void FlushSteps();

 private:
  Status HandleSetOptimizer(const Message& msg);
  Status HandleInit(const Message& msg);
  // INIT with optimizer_state: restores the momentum of known slices (checkpoint resume).
  Status HandleInitState(const Message& msg);
  Status HandleSetLr(const Message& msg);
  Status CheckLeadCommand(const wire::Meta& m) const;  // INIT, SET_OPTIMIZER, SET_LR: who sends
  Status AdmitStep(const Message& msg, int64_t window);
  // What HandlePush tells the pull of a PUSHPULL.
  struct PushOutcome {
    bool answered_before = false;  // a duplicate whose step was overtaken: answer nothing
    bool not_applied = false;      // async: a slice's push was not finite, and not applied
  };
  Status HandlePush(Message* msg, PushOutcome* out);
  // A slice's push counted: async, applied at once; sync, kept until its step is ready.
  void TakePush(ServerSlice* s, const wire::Meta& m, Tensor grad, float scale, bool finite);
  // A push of a step already counted for that worker: counted, logged now and then.
  void NoteDuplicate(const wire::Meta& m, uint64_t key, int rank);
  void AnswerPull(const PendingPull& p);
  // The profiler's record of one Apply: sum from t0 to t1, update from t1 to t2 (-1: none).
  void RecordApply(int64_t step, uint64_t key, int64_t t0, int64_t t1, int64_t t2);
  // The step record of `step` (creating it), touched now.
  profile::StepRecord* StepLoad(int64_t step, int64_t now_us);

  const NodeIds ids_;
  const SendFn send_;
  CoreHooks plain_;      // hooks_ when no layer gives its own
  CoreHooks* hooks_;
  bool async_ = false;
  bool pushed_ = false;  // a push has arrived: the optimizer can no longer change
  std::unique_ptr<Updater> updater_;  // null: pushes replace the values
  OptimizerConfig optimizer_;  // SET_OPTIMIZER's, as given: each key's wd (KeyWd)
  StepRates lr_;  // SET_OPTIMIZER's and SET_LR's learning rates by step
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<ServerSlice>> slices_;  // by (key, offset)
  int num_waiting_ = 0;  // pulls not yet answered
  int64_t duplicates_ = 0;
  int64_t refused_ = 0;
  std::pair<int64_t, int> logged_skip_{-1, -1};  // (step, rank) of the last LogSkip line

  std::function<void(const profile::StepRecord&)> recorder_;
  std::function<void(int64_t step)> step_begins_;
  std::map<int64_t, profile::StepRecord> open_steps_;  // by step, until recorded
};

}  // namespace tally
