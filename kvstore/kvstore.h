// KVStore: the one interface through which training code exchanges gradients and weights.
// The training loop does not change when the type does; the user picks it with --kv-store.
//
//   KVStoreSpec spec;
//   TALLY_RETURN_IF_ERROR(ParseKVStoreType("device", &spec.type));  // --kv-store's value
//   spec.num_devices = 2;
//   std::unique_ptr<KVStore> kv;
//   TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
//   TALLY_RETURN_IF_ERROR(kv->SetOptimizer(opt));
//   TALLY_RETURN_IF_ERROR(kv->Init(keys, weights));            // once, every key
//   TALLY_RETURN_IF_ERROR(kv->PushPull(key, grads, weights));  // every step: one per device
//   TALLY_RETURN_IF_ERROR(kv->WaitAll());                      // the step's data has moved
//
// Types (the README's table):
//   local   gradients are summed on the CPU, the optimizer updates one stored copy of the
//           weights, and every device pulls it.
//   device  gradients are summed across the devices, and each device runs the optimizer on
//           its own copy (CPU devices: in host memory). Same results as local.
// The distributed types (dist_sync, dist_device_sync, dist_async) implement this interface
// over the parameter server (dist_kvstore.h), through the Cluster the process joined.
//
// Semantics (MXNet's): Push sums one value per device in device order (reproducible); with
// an optimizer set, the sum is the gradient the optimizer applies, otherwise it replaces the
// stored value. Pull copies the stored value into every output, converting the dtype.
// Keys are small non-negative integers (a parameter's index). A KVStore is driven by one
// thread.
//
// The calls of KVStore are MXNet's, and all a script needs (tally.kv, bench ps). What only the
// training loop uses, loss scaling, skipped steps, stopping together, the profiler's times
// and the capabilities only some types have (fp32 master weights, steps kept on the GPUs),
// is behind a narrower interface the store hands out (trainer_hooks.h):
//
//   TrainerHooks* hooks = kv->trainer_hooks();
//   TALLY_RETURN_IF_ERROR(hooks->SetGradientScale(loss_scale));
//   ... PushPull every key, WaitAll ...
//   SkippedStep skip;
//   if (hooks->TakeSkippedStep(&skip)) lower the loss scale;
//
// What --elastic's training loop, data source and joiners ask about the job's workers (who is
// live, the changes heard, a joiner's first step) is behind another (membership_view.h):
//
//   std::vector<MembershipView::Membership> changes;
//   TALLY_RETURN_IF_ERROR(kv->membership_view()->HeardMembership(&changes));
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "compress/compress.h"
#include "kvstore/membership_view.h"
#include "kvstore/trainer_hooks.h"
#include "ops/ops.h"
#include "base/status.h"
#include "base/tensor.h"
#include "optim/optimizer_config.h"

namespace tally {

class Cluster;  // net/cluster.h

// The kvstore types; each one's spelling is --kv-store's value (KVStoreTypeName).
enum class KVStoreType { kLocal, kDevice, kDistSync, kDistDeviceSync, kDistAsync };
// "local", "device", "dist_sync", "dist_device_sync", "dist_async".
const std::string& KVStoreTypeName(KVStoreType type);
std::ostream& operator<<(std::ostream& os, KVStoreType type);  // its name: logs, test messages
// Reads --kv-store's value. A bad one fails naming the flag and the valid values.
Status ParseKVStoreType(const std::string& name, KVStoreType* out);
// Over the parameter server: the dist_* types, which need the process's Cluster.
inline bool IsDistributed(KVStoreType t) {
  return t == KVStoreType::kDistSync || t == KVStoreType::kDistDeviceSync || t == KVStoreType::kDistAsync;
}
// dist_sync and dist_device_sync: the servers sum every worker's step t before updating, so
// a step's gradient is the mean over the job's global batch. (dist_async applies each push
// on its own; local and device are one worker.)
inline bool IsDistributedSync(KVStoreType t) {
  return t == KVStoreType::kDistSync || t == KVStoreType::kDistDeviceSync;
}

// What KVStore::Create makes.
struct KVStoreSpec {
  KVStoreType type = KVStoreType::kDevice;
  // Host devices: how many values each Push gives and each Pull fills. Unused with gpus.
  int num_devices = 1;
  // Non-empty: one replica per entry, cuda devices of this process. local and device then
  // sum across the GPUs with NCCL and every GPU runs the optimizer on its own fp32 master
  // weights (gpu_kvstore.h); the distributed types sum there before pushing
  // (gpu_dist_kvstore.h). Fails in a build without CUDA.
  std::vector<Device> gpus;
  // The job this process joined as a worker. The distributed types need it (without it they
  // fail saying so); local and device ignore it. Must outlive the store.
  Cluster* cluster = nullptr;
};

class KVStore {
 public:
  // The one way to make a store of any type (KVStoreSpec). Fails, saying why, when the spec
  // cannot be met (no devices, a distributed type without a Cluster, GPUs in a build
  // without CUDA, ...).
  static Status Create(const KVStoreSpec& spec, std::unique_ptr<KVStore>* out);
  KVStore() = default;
  KVStore(const KVStore&) = delete;  // fixed_membership_ points at this one
  KVStore& operator=(const KVStore&) = delete;
  virtual ~KVStore() = default;

  virtual KVStoreType type() const = 0;
  const std::string& name() const { return KVStoreTypeName(type()); }  // --kv-store's value
  virtual int rank() const { return 0; }
  virtual int num_workers() const { return 1; }
  virtual Status Barrier() { return Status::Ok(); }

  // REQUIRES: called before Init.
  virtual Status SetOptimizer(const OptimizerConfig& config) = 0;
  // Changes the learning rate from the next update on (schedules call it every step).
  virtual void SetLearningRate(float lr) = 0;
  // MXNet's kv.set_gradient_compression (compress/compress.h): from then on each push sends
  // packed bits, the store keeping a residual per key of what they did not carry; the
  // servers dequantise and sum. The distributed types compress, and `device` on CPU devices
  // between its devices (as MXNet's device kvstore does); the others refuse.
  // REQUIRES: called before the first push.
  virtual Status SetGradientCompression(const CompressionConfig& config) {
    if (!config.enabled()) return Status::Ok();
    return Status::InvalidArgument("gradient compression needs the device kvstore (CPU devices) or a dist_* one, not " +
                                   name() + " here");
  }

  // Registers keys with their initial values (copied). A key is registered once. The
  // distributed types need every key in one call (their placement of keys on servers
  // depends on all the sizes) and fail otherwise.
  virtual Status Init(const std::vector<int>& keys, const std::vector<Tensor>& values) = 0;
  Status Init(int key, const Tensor& value) { return Init(std::vector<int>{key}, std::vector<Tensor>{value}); }
  // vals: one tensor per device, shaped as the key's value. priority orders the
  // communication of the distributed types (higher first); single-process types ignore it.
  virtual Status Push(int key, const std::vector<Tensor>& vals, int priority = 0) = 0;
  // outs: one tensor per device; their storage receives the value.
  virtual Status Pull(int key, const std::vector<Tensor>& outs, int priority = 0) = 0;
  virtual Status PushPull(int key, const std::vector<Tensor>& vals, const std::vector<Tensor>& outs,
                          int priority = 0);
  // The distributed types may return from Push, Pull and PushPull before the data has
  // moved: a pushed tensor must not be written, and a pulled one not read, until WaitAll
  // returns. The single-process types finish every call before returning.
  virtual Status WaitAll() { return Status::Ok(); }
  // Waits for key's calls alone: once it returns, key's pulled outputs may be read and its
  // pushed values written, while other keys may still be on their way. The next forward
  // pass calls it for each parameter just before the layer that reads it, so that layer 1
  // starts as soon as layer 1's weights are back (communication overlaps the forward pass).
  // Reports the cluster's failure; a skipped step is found by WaitAll, which must still
  // follow before the step's results count. The single-process types have nothing to wait for.
  virtual Status WaitKey(int key) { return Status::Ok(); }

  // Checkpoints (MXNet's save/load_optimizer_states). GetOptimizerState fills (*states)[i]
  // with a copy of key keys[i]'s optimizer state (SGD momentum), fp32, shaped as the key's
  // value: zeros before its first update, an undefined tensor when the optimizer keeps none
  // (momentum 0). The distributed types read it from the servers as of the worker's last
  // push: call it after WaitAll.
  virtual Status GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) = 0;
  // Restores what GetOptimizerState gave, after Init and before the first push. The
  // distributed types: every worker calls it (worker 0 sends, the others wait for it).
  virtual Status SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) = 0;

  // What a training loop needs beyond these calls (trainer_hooks.h): loss scaling, skipped
  // steps, stopping together, the profiler's times, master weights. Never null; owned by
  // the store.
  virtual TrainerHooks* trainer_hooks() = 0;
  // --elastic: the job's workers as this one hears of them, and a joiner's first step
  // (membership_view.h). Never null; owned by the store. Types without workers that come and
  // go keep the default: every worker live, nothing heard, first step 0.
  virtual MembershipView* membership_view() { return &fixed_membership_; }

  // The name DistChannel knows a skipped step by.
  using SkippedStep = ::tally::SkippedStep;

 private:
  FixedMembership fixed_membership_{this};
};

}  // namespace tally
