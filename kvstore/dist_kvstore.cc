// DistKVStore: dist_sync, dist_device_sync and dist_async over a Cluster (dist_kvstore.h).
#include "kvstore/dist_kvstore.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <map>
#include <memory>
#include <utility>

#include <glog/logging.h>

#include "kvstore/comm.h"
#include "kvstore/dist_channel.h"
#include "kvstore/factories.h"
#include "kvstore/packed_push.h"
#include "kvstore/placement.h"
#include "optim/reduce.h"

namespace tally {
namespace {

Tensor Flat(const Tensor& t) { return t.Reshape({t.numel()}); }

class DistKVStore : public KVStore, public TrainerHooks, public MembershipView, public MasterWeightStore, public PackedPushes {
 public:
  DistKVStore(KVStoreType type, int num_devices, Cluster* cluster, std::unique_ptr<Comm> comm)
      : type_(type),
        num_devices_(num_devices),
        cluster_(cluster),
        comm_(std::move(comm)),
        channel_(std::make_shared<DistChannel>(cluster, type != KVStoreType::kDistAsync)) {
    std::shared_ptr<DistChannel> ch = channel_;
    cluster_->SetDataHandler([ch](Message&& m) { ch->OnMessage(std::move(m)); });
    cluster_->OnFailure([ch](const Status& s) { ch->OnFailure(s); });
    channel_->Start();
  }
  ~DistKVStore() override {
    channel_->Stop();
    cluster_->SetDataHandler([](Message&&) {});
  }

  KVStoreType type() const override { return type_; }
  TrainerHooks* trainer_hooks() override { return this; }
  MembershipView* membership_view() override { return this; }
  MasterWeightStore* master_weights() override { return this; }
  int rank() const override { return cluster_->me().rank(); }
  int num_workers() const override { return cluster_->num_workers(); }
  Membership membership() const override {
    Membership m = channel_->membership();
    return m.epoch > 0 ? m : Everyone(num_workers());
  }
  Status HeardMembership(std::vector<Membership>* out) override {
    return channel_->HeardMembership(out, kDistWaitTimeoutMs);
  }
  int summed_workers() const override {
    const int n = channel_->summed_workers();
    return n > 0 ? n : num_workers();
  }
  int64_t first_step() const override { return first_step_; }
  Status TellLossScale(int r, int64_t step, const LossScaleState& s) override { return channel_->TellLossScale(r, step, s); }
  Status JoinedLossScale(int64_t t, LossScaleState* out) override {  // told by the lead before the join
    std::vector<Membership> c;
    TALLY_RETURN_IF_ERROR(HeardMembership(&c));
    const int teller = JoinTeller(c, JoinEpoch(c, rank(), t, num_workers()), num_workers());
    return channel_->LossScaleFor(t, teller, kDistWaitTimeoutMs, out);
  }
  void SetElastic() override { elastic_ = true; }
  Status Barrier() override { return cluster_->Barrier(kGroupWorkers, kDistWaitTimeoutMs); }

  Status SetOptimizer(const OptimizerConfig& config) override {
    TALLY_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
    if (initialised_) return Status::InvalidArgument("SetOptimizer must come before Init");
    optimizer_ = config;
    has_optimizer_ = true;
    return Status::Ok();
  }

  void SetLearningRate(float lr) override;
  Status SetGradientCompression(const CompressionConfig& config) override {
    if (pushed_) return Status::InvalidArgument("gradient compression must be set before the first push");
    gc_ = config;
    if (gc_.enabled()) {
      LOG(INFO) << "kvstore: gradient compression " << CompressionName(gc_.type) << ", threshold " << gc_.threshold
                << " for gradients times " << gc_.scale << ": pushes send packed bits, the residuals stay here";
    }
    return Status::Ok();
  }
  Status GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) override;
  // The servers start from the fp32 values given to Init: nothing to restore here.
  Status SetMasterWeights(const std::vector<int>& keys, const std::vector<Tensor>& values) override {
    return Status::InvalidArgument("--kv-store " + name() + " keeps no fp32 master weights here");
  }
  Status SetGradientScale(float scale) override {  // sent with every push (Meta.grad_scale)
    if (!(scale > 0.0f)) return Status::InvalidArgument("a gradient scale must be positive");
    gradient_scale_ = scale;
    return Status::Ok();
  }

  using KVStore::Init;
  Status Init(const std::vector<int>& keys, const std::vector<Tensor>& values) override;
  Status Push(int key, const std::vector<Tensor>& vals, int priority) override;
  Status Pull(int key, const std::vector<Tensor>& outs, int priority) override;
  // One PUSHPULL per slice: the server answers the push with the values after its update.
  Status PushPull(int key, const std::vector<Tensor>& vals, const std::vector<Tensor>& outs,
                  int priority) override;
  // After the step's answers: when one said the step was skipped (a non-finite gradient on
  // some server), dist_sync rolls it back on every server first (RollBack).
  Status WaitAll() override;
  Status WaitKey(int key) override { return channel_->WaitKey(key, kDistWaitTimeoutMs); }
  bool TakeSkippedStep(SkippedStep* out) override {
    if (has_skipped_) *out = skipped_;
    return std::exchange(has_skipped_, false);
  }
  Times TakeTimes() override { return Times{channel_->TakePullMicros(), 0, /*on_caller_thread=*/false}; }
  Status GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) override;
  Status SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) override;
  Status KeySlices(int key, std::vector<Placement::Slice>* out) const override;
  Status PushPullPacked(int key, const std::vector<Tensor>& packed, const Tensor& raw,
                        const std::vector<Tensor>& outs, int priority) override;
  // dist_async has no common step: each worker stops once it asked or saw an answer
  // saying another did.
  bool StopAgreed() const override {
    return channel_->stop_seen() || (type_ == KVStoreType::kDistAsync && stop_requested_);
  }

 private:
  struct Key {
    int64_t numel = 0;
    std::vector<Placement::Slice> slices;
    int64_t next_step = 0;  // the step of the next push
    std::vector<Tensor> outs;  // the last Pull's or PushPull's outputs (a rollback rewrites them)
    Tensor residual;  // gradient compression: fp32, what the pushed bits have not carried yet
  };
  Status Find(int key, const std::vector<Tensor>& ts, const char* what, Key** out);
  // Init of a worker that joined the running job (dist_kvstore.h): its first step, and the
  // job's weights after the step before into values, exactly (no server applies the first
  // without its push); a skip of that step is rolled back here too and not reported.
  Status InitJoiner(const std::vector<int>& keys, const std::vector<Tensor>& values);
  // Sends worker 0's INIT of the values (or, with optimizer_state, the optimizer state) of
  // keys, one message per server; WaitAll waits for the answers.
  // With optimizer_state, values are slot state_slot of the keys' optimizer state.
  Status SendInit(const std::vector<int>& keys, const std::vector<Tensor>& values, bool optimizer_state,
                  int state_slot = 0);
  // Pulls every slice of key into flat (1-D), then copies flat into others; with command
  // ROLLBACK, the values after the key's last step is undone (flat may be undefined then:
  // the answers are dropped).
  void PullSlices(wire::Command command, int key, const Key& k, const Tensor& flat, const std::vector<Tensor>& others,
                  int priority, bool optimizer_state, int state_slot = 0);
  // --server-replicas: m (a PUSH, PUSHPULL or ROLLBACK of a slice of server `server_rank`)
  // as a copy for each live backup of the slice, a PUSHPULL as a PUSH. Synchronous steps
  // reach the backups from the primary (REPLICATE), so only dist_async's pushes, which each
  // replica applies as they come, and rollbacks go as copies.
  void SendCopies(int server_rank, const Message& m, const PendingRequest& p, int priority);
  // Asks every server to undo step `step` of every key whose last push was of that step,
  // writing the restored weights into the keys' last pull outputs (docs/wire.md, ROLLBACK).
  void RollBack(int64_t step);
  Message Request(wire::Command command, int64_t step) const {
    Message m;
    m.meta.set_command(command);
    m.meta.set_step(step);
    m.meta.set_async(type_ == KVStoreType::kDistAsync);
    m.meta.set_num_workers(cluster_->num_workers());
    return m;
  }

  // A PUSH or PUSHPULL of one slice of `sum` (a view: sent without copying; with gradient
  // compression its packed bits, SetSlicePayload, or PushPullPacked's), and the pending
  // record that keeps the data alive until the answer.
  Message SliceRequest(wire::Command command, int64_t step, int key, const Placement::Slice& sl,
                       const Tensor& sum, PendingRequest* pending) {
    Message m = Request(command, step);
    m.meta.set_stop(stop_requested_);
    wire::KeySlice* ks = m.meta.add_slices();
    ks->set_key(key);
    ks->set_offset(sl.offset);
    ks->set_length(sl.length);
    const Tensor part = sum.Slice(sl.offset, sl.offset + sl.length);
    Key& k = keys_.at(key);
    const Tensor* pre = prepacked_ == nullptr ? nullptr : &prepacked_->at(sl.offset);
    SetSlicePayload(gc_, gradient_scale_, sl, part, pre, k.numel, &k.residual, &m);
    pushed_ = true;
    pending->command = command;
    pending->key = key;
    pending->keep = m.data;
    return m;
  }

  const KVStoreType type_;
  const int num_devices_;
  Cluster* const cluster_;
  // The devices' sum, in the values' dtype (vals[0] itself for one device): what is pushed.
  const std::unique_ptr<Comm> comm_;
  std::shared_ptr<DistChannel> channel_;
  bool has_optimizer_ = false;
  bool elastic_ = false;  // SetElastic
  OptimizerConfig optimizer_;
  float gradient_scale_ = 1.0f;  // SetGradientScale
  bool initialised_ = false;
  CompressionConfig gc_;  // SetGradientCompression
  bool pushed_ = false;   // a push has gone out: the compression is fixed
  const std::map<int64_t, Tensor>* prepacked_ = nullptr;  // by slice offset, during PushPullPacked
  std::map<int, Key> keys_;
  int64_t rolled_back_ = -1;  // the last step RollBack undid: later answers of it are no news
  SkippedStep skipped_;       // for TakeSkippedStep
  bool has_skipped_ = false;
  int64_t first_step_ = 0;    // first_step()
};

Status DistKVStore::WaitAll() {
  TALLY_RETURN_IF_ERROR(channel_->WaitAll(kDistWaitTimeoutMs));
  SkippedStep skip;
  if (!channel_->TakeSkip(&skip) || skip.step == rolled_back_) return Status::Ok();
  if (type_ != KVStoreType::kDistAsync) {
    RollBack(skip.step);
    TALLY_RETURN_IF_ERROR(channel_->WaitAll(kDistWaitTimeoutMs));
    rolled_back_ = skip.step;
  }
  skipped_ = skip;
  has_skipped_ = true;
  return Status::Ok();
}

void DistKVStore::RollBack(int64_t step) {
  for (auto& [key, k] : keys_) {
    if (k.next_step - 1 != step) continue;
    const Tensor flat = k.outs.empty() ? Tensor() : Flat(k.outs[0]);
    const std::vector<Tensor> others = k.outs.empty() ? std::vector<Tensor>() : std::vector<Tensor>(k.outs.begin() + 1, k.outs.end());
    PullSlices(wire::ROLLBACK, key, k, flat, others, INT_MAX, /*optimizer_state=*/false);
  }
}

Status DistKVStore::Init(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  if (initialised_) {
    return Status::InvalidArgument("kvstore " + name() + " needs every key in one Init call");
  }
  if (keys.size() != values.size() || keys.empty()) {
    return Status::InvalidArgument("kvstore Init with " + std::to_string(keys.size()) + " keys and " +
                                   std::to_string(values.size()) + " values");
  }
  // Placement numbers keys in increasing order, so every worker computes the same one
  // whatever order its caller lists them in.
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::vector<int64_t> sizes;
  for (size_t i : order) {
    if (keys[i] < 0) return Status::InvalidArgument("kvstore key " + std::to_string(keys[i]) + " is negative");
    if (!sizes.empty() && keys[i] == keys[order[sizes.size() - 1]]) {
      return Status::InvalidArgument("kvstore key " + std::to_string(keys[i]) + " initialised twice");
    }
    if (!IsWireDType(values[i].dtype()) || !values[i].device().is_cpu()) {
      return Status::InvalidArgument("kvstore Init of key " + std::to_string(keys[i]) + " with " +
                                     values[i].ToString() + " (float32, float16 or bfloat16 on the CPU)");
    }
    sizes.push_back(values[i].numel());
  }
  const Placement placement = Placement::Compute(sizes, cluster_->num_servers());
  for (size_t k = 0; k < order.size(); ++k) {
    Key& info = keys_[keys[order[k]]];
    info.numel = sizes[k];
    info.slices = placement.slices(static_cast<int>(k));
  }
  initialised_ = true;
  if (cluster_->joined_after_epoch() > 0) return InitJoiner(keys, values);

  if (rank() == 0) {
    if (has_optimizer_) {
      // Spares too: one may come to serve.
      for (int s = 0; s < cluster_->ids().all_servers(); ++s) {
        if (!cluster_->ServerAlive(s)) continue;
        Message m = Request(wire::SET_OPTIMIZER, 0);
        *m.meta.mutable_optimizer() = ToWireOptimizer(optimizer_);
        PendingRequest p;
        p.command = wire::SET_OPTIMIZER;
        channel_->Enqueue(cluster_->ServerId(s), std::move(m), INT_MAX, std::move(p));
      }
    }
    TALLY_RETURN_IF_ERROR(SendInit(keys, values, /*optimizer_state=*/false));
    TALLY_RETURN_IF_ERROR(WaitAll());
  }
  return Barrier();
}

Status DistKVStore::InitJoiner(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  const int64_t after = cluster_->joined_after_epoch();
  int64_t applied = -1;
  const auto t0 = std::chrono::steady_clock::now();
  TALLY_RETURN_IF_ERROR(channel_->JoinedFrom(rank(), after, kDistWaitTimeoutMs, &first_step_, &applied));
  const auto t1 = std::chrono::steady_clock::now();
  const auto& [probe, k0] = *keys_.begin();
  TALLY_RETURN_IF_ERROR(channel_->ReachStep(probe, k0.slices, applied, first_step_ - 1, kDistWaitTimeoutMs));
  for (auto& [key, k] : keys_) k.next_step = first_step_;
  for (size_t i = 0; i < keys.size(); ++i) {
    Key& k = keys_.at(keys[i]);
    k.outs = {values[i]};
    PullSlices(wire::PULL, keys[i], k, Flat(values[i]), {}, INT_MAX, /*optimizer_state=*/false);
  }
  TALLY_RETURN_IF_ERROR(WaitAll());
  has_skipped_ = false;
  const std::chrono::milliseconds ms(1);
  LOG(INFO) << "kvstore: worker " << rank() << " joined after membership " << after << ": pushes from step "
            << first_step_ << ", weights after step " << first_step_ - 1 << " (MEMBERSHIP in " << (t1 - t0) / ms
            << " ms, weights " << (std::chrono::steady_clock::now() - t1) / ms << " ms later)";
  return Status::Ok();
}

Status DistKVStore::SendInit(const std::vector<int>& keys, const std::vector<Tensor>& values, bool optimizer_state,
                             int state_slot) {
  const int servers = cluster_->num_servers();
  const int replicas = cluster_->server_replicas();
  // One message per (holder, chain): every server of a slice's chain holds it, and learns
  // which chain it is on (--server-replicas; without, each server its own slices).
  std::map<std::pair<int, int>, Message> inits;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Tensor flat = Flat(values[i]);
    for (const Placement::Slice& sl : keys_.at(keys[i]).slices) {
      for (int holder : ReplicaChain(sl.server, replicas, servers)) {
        auto [it, fresh] = inits.try_emplace({holder, sl.server});
        Message& m = it->second;
        if (fresh) {
          m = Request(wire::INIT, -1);
          m.meta.set_optimizer_state(optimizer_state);
          if (optimizer_state) m.meta.set_state_slot(state_slot);
          if (replicas > 0) m.meta.set_chain(sl.server + 1);
        }
        m.meta.set_dtype(ToWire(flat.dtype()));
        wire::KeySlice* ks = m.meta.add_slices();
        ks->set_key(keys[i]);
        ks->set_offset(sl.offset);
        ks->set_length(sl.length);
        m.data.push_back(flat.Slice(sl.offset, sl.offset + sl.length));
      }
    }
  }
  // A message has one dtype: values of mixed dtypes go as fp32.
  for (auto& [to, m] : inits) {
    bool mixed = false;
    for (const Tensor& t : m.data) mixed |= t.dtype() != FromWire(m.meta.dtype());
    if (!mixed) continue;
    m.meta.set_dtype(wire::F32);
    for (Tensor& t : m.data) t = t.To(DType::kF32);
  }
  for (auto& [to, m] : inits) {
    if (!cluster_->ServerAlive(to.first)) continue;
    PendingRequest p;
    p.command = wire::INIT;
    p.keep = m.data;
    channel_->Enqueue(cluster_->ServerId(to.first), std::move(m), INT_MAX, std::move(p));
  }
  return Status::Ok();
}

Status DistKVStore::GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) {
  states->assign(keys.size(), Tensor());
  for (int key : keys) {
    if (!keys_.count(key)) return Status::InvalidArgument("optimizer state of key " + std::to_string(key) + " before Init");
  }
  // The servers hand the state out one slot at a time (Meta.state_slot); slot j of a key
  // fills values [j * numel, (j + 1) * numel) of its state.
  const int slots = has_optimizer_ ? OptimizerStateSlots(optimizer_) : 0;
  if (slots == 0) return Status::Ok();
  for (size_t i = 0; i < keys.size(); ++i) {
    Key& k = keys_[keys[i]];
    (*states)[i] = Tensor::Empty({slots * k.numel}, DType::kF32);
    for (int j = 0; j < slots; ++j) {
      PullSlices(wire::PULL, keys[i], k, (*states)[i].Slice(j * k.numel, (j + 1) * k.numel), {}, INT_MAX,
                 /*optimizer_state=*/true, j);
    }
  }
  return WaitAll();
}

// The servers' values are the fp32 master weights: a pull of them in fp32, which does not
// touch the keys' registered outputs (what a rollback rewrites).
Status DistKVStore::GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) {
  out->assign(keys.size(), Tensor());
  for (int key : keys) {
    if (!keys_.count(key)) return Status::InvalidArgument("master weights of key " + std::to_string(key) + " before Init");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Key& k = keys_[keys[i]];
    (*out)[i] = Tensor::Empty({k.numel}, DType::kF32);
    PullSlices(wire::PULL, keys[i], k, (*out)[i], {}, INT_MAX, /*optimizer_state=*/false);
  }
  return WaitAll();
}

Status DistKVStore::SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) {
  if (keys.size() != states.size()) return Status::InvalidArgument("optimizer state: keys and states differ in number");
  const int slots = has_optimizer_ ? OptimizerStateSlots(optimizer_) : 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = keys_.find(keys[i]);
    if (it == keys_.end()) return Status::InvalidArgument("optimizer state of key " + std::to_string(keys[i]) + " before Init");
    if (states[i].defined() != (slots > 0) || (slots > 0 && states[i].numel() != slots * it->second.numel)) {
      return Status::InvalidArgument("optimizer state of key " + std::to_string(keys[i]) + " does not fit the optimizer");
    }
  }
  if (rank() == 0 && slots > 0) {
    for (int j = 0; j < slots; ++j) {
      std::vector<Tensor> slot(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        const int64_t n = keys_.at(keys[i]).numel;
        slot[i] = Flat(states[i]).Slice(j * n, (j + 1) * n);
      }
      TALLY_RETURN_IF_ERROR(SendInit(keys, slot, /*optimizer_state=*/true, j));
    }
    TALLY_RETURN_IF_ERROR(WaitAll());
  }
  return Barrier();
}

Status DistKVStore::Find(int key, const std::vector<Tensor>& ts, const char* what, Key** out) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    return Status::InvalidArgument(std::string(what) + " of key " + std::to_string(key) + " before Init");
  }
  if (static_cast<int>(ts.size()) != num_devices_) {
    return Status::InvalidArgument(std::string(what) + " of key " + std::to_string(key) + " with " +
                                   std::to_string(ts.size()) + " values for " +
                                   std::to_string(num_devices_) + " devices");
  }
  for (const Tensor& t : ts) {
    if (t.numel() != it->second.numel || !IsWireDType(t.dtype()) || !t.device().is_cpu()) {
      return Status::InvalidArgument(std::string(what) + " of key " + std::to_string(key) + ": " +
                                     t.ToString() + " does not match its " +
                                     std::to_string(it->second.numel) + " float values");
    }
  }
  *out = &it->second;
  return Status::Ok();
}

Status DistKVStore::Push(int key, const std::vector<Tensor>& vals, int priority) {
  Key* k = nullptr;
  TALLY_RETURN_IF_ERROR(Find(key, vals, "push", &k));
  const Tensor sum = Flat(comm_->Reduce(key, vals));
  const int64_t step = k->next_step++;
  for (const Placement::Slice& sl : k->slices) {
    PendingRequest p;
    Message m = SliceRequest(wire::PUSH, step, key, sl, sum, &p);
    if (type_ == KVStoreType::kDistAsync) SendCopies(sl.server, m, p, priority);
    channel_->EnqueueToChain(sl.server, std::move(m), priority, std::move(p));
  }
  return Status::Ok();
}

Status DistKVStore::Pull(int key, const std::vector<Tensor>& outs, int priority) {
  Key* k = nullptr;
  TALLY_RETURN_IF_ERROR(Find(key, outs, "pull", &k));
  k->outs = outs;
  PullSlices(wire::PULL, key, *k, Flat(outs[0]), std::vector<Tensor>(outs.begin() + 1, outs.end()), priority,
             /*optimizer_state=*/false);
  return Status::Ok();
}

void DistKVStore::PullSlices(wire::Command command, int key, const Key& k, const Tensor& flat,
                             const std::vector<Tensor>& others, int priority, bool optimizer_state,
                             int state_slot) {
  std::shared_ptr<PullOp> op;
  if (flat.defined()) {
    op = std::make_shared<PullOp>();
    op->flat = flat;
    op->others = others;
    op->remaining = static_cast<int>(k.slices.size());
  }
  for (const Placement::Slice& sl : k.slices) {
    // The values after this worker's last push of the key (-1: the initial ones).
    Message m = Request(command, k.next_step - 1);
    m.meta.set_pull_dtype(ToWire(flat.defined() ? flat.dtype() : DType::kF32));
    m.meta.set_optimizer_state(optimizer_state);
    if (optimizer_state) m.meta.set_state_slot(state_slot);
    wire::KeySlice* ks = m.meta.add_slices();
    ks->set_key(key);
    ks->set_offset(sl.offset);
    ks->set_length(sl.length);
    PendingRequest p;
    p.command = command;
    p.key = key;
    p.pull = op;
    p.offset = sl.offset;
    p.length = sl.length;
    // A rollback undoes the step on the backups too (their answers are not needed).
    if (command == wire::ROLLBACK) SendCopies(sl.server, m, p, priority);
    channel_->EnqueueToChain(sl.server, std::move(m), priority, std::move(p));
  }
}

void DistKVStore::SendCopies(int server_rank, const Message& m, const PendingRequest& p, int priority) {
  const std::vector<int> holders = channel_->Holders(server_rank);
  for (size_t i = 1; i < holders.size(); ++i) {
    const int node = cluster_->ServerId(holders[i]);
    Message copy = m;
    if (copy.meta.command() == wire::PUSHPULL) copy.meta.set_command(wire::PUSH);
    PendingRequest c;
    c.command = copy.meta.command();
    c.key = p.key;
    c.keep = p.keep;
    c.offset = p.offset;
    c.length = p.length;
    c.replica_copy = true;
    channel_->Enqueue(node, std::move(copy), priority, std::move(c));
  }
}

Status DistKVStore::PushPull(int key, const std::vector<Tensor>& vals, const std::vector<Tensor>& outs,
                             int priority) {
  Key* k = nullptr;
  TALLY_RETURN_IF_ERROR(Find(key, vals, "pushpull", &k));
  TALLY_RETURN_IF_ERROR(Find(key, outs, "pushpull", &k));
  k->outs = outs;
  const Tensor sum = Flat(comm_->Reduce(key, vals));
  const int64_t step = k->next_step++;
  auto op = std::make_shared<PullOp>();
  op->flat = Flat(outs[0]);
  op->others.assign(outs.begin() + 1, outs.end());
  op->remaining = static_cast<int>(k->slices.size());
  for (const Placement::Slice& sl : k->slices) {
    PendingRequest p;
    Message m = SliceRequest(wire::PUSHPULL, step, key, sl, sum, &p);
    m.meta.set_pull_dtype(ToWire(outs[0].dtype()));
    p.pull = op;
    p.offset = sl.offset;
    p.length = sl.length;
    if (type_ == KVStoreType::kDistAsync) SendCopies(sl.server, m, p, priority);
    channel_->EnqueueToChain(sl.server, std::move(m), priority, std::move(p));
  }
  return Status::Ok();
}

Status DistKVStore::KeySlices(int key, std::vector<Placement::Slice>* out) const {
  auto it = keys_.find(key);
  if (it == keys_.end()) return Status::InvalidArgument("key " + std::to_string(key) + " before Init");
  *out = it->second.slices;
  return Status::Ok();
}

Status DistKVStore::PushPullPacked(int key, const std::vector<Tensor>& packed, const Tensor& raw,
                                   const std::vector<Tensor>& outs, int priority) {
  std::vector<Placement::Slice> slices;
  TALLY_RETURN_IF_ERROR(KeySlices(key, &slices));
  std::map<int64_t, Tensor> by_offset;
  TALLY_RETURN_IF_ERROR(PackedByOffset(gc_, key, slices, packed, &by_offset));
  prepacked_ = &by_offset;
  Status s = PushPull(key, {raw}, outs, priority);
  prepacked_ = nullptr;
  return s;
}

void DistKVStore::SetLearningRate(float lr) {
  if (!initialised_) {
    optimizer_.lr = lr;  // goes out with SET_OPTIMIZER
    return;
  }
  // --elastic: each live worker sends it (any may come to lead; docs/wire.md, "SET_LR").
  if (!has_optimizer_ || (rank() != 0 && !elastic_)) return;
  // Applies from the next push on; keys normally share one step count (every step pushes
  // every key), otherwise the most advanced key's next step is taken.
  int64_t step = 0;
  for (const auto& kv : keys_) step = std::max(step, kv.second.next_step);
  for (int s = 0; s < cluster_->ids().all_servers(); ++s) {
    if (!cluster_->ServerAlive(s)) continue;
    Message m = Request(wire::SET_LR, step);
    m.meta.set_lr(lr);
    PendingRequest p;
    p.command = wire::SET_LR;
    channel_->Enqueue(cluster_->ServerId(s), std::move(m), INT_MAX, std::move(p));
  }
}

}  // namespace

Status NewDistKVStore(KVStoreType kind, int num_devices, Cluster* cluster, std::unique_ptr<KVStore>* out) {
  const std::string& type = KVStoreTypeName(kind);
  if (!IsDistributed(kind)) {
    return Status::InvalidArgument("kvstore type '" + type +
                                   "' is not distributed (dist_sync, dist_device_sync or dist_async)");
  }
  if (num_devices < 1) return Status::InvalidArgument("a kvstore needs at least one device");
  if (cluster == nullptr) return Status::InvalidArgument("kvstore " + type + " needs a cluster");
  if (cluster->me().role() != wire::WORKER) {
    return Status::InvalidArgument("kvstore " + type + " runs on a worker, not on " +
                                   DescribeNode(cluster->me()));
  }
  std::unique_ptr<Comm> comm;
  TALLY_RETURN_IF_ERROR(NewComm(std::vector<Device>(num_devices, Device::Cpu()), MergedDType::kAsValues, &comm));
  out->reset(new DistKVStore(kind, num_devices, cluster, std::move(comm)));
  return Status::Ok();
}

#ifndef TALLY_HAVE_CUDA
Status NewDistKVStoreOnGpus(KVStoreType type, const std::vector<Device>& devices, Cluster* cluster,
                            std::unique_ptr<KVStore>* out) {
  return Status::InvalidArgument("--kv-store " + KVStoreTypeName(type) +
                                 " on GPUs: this tally was built without CUDA");
}
#endif

}  // namespace tally
