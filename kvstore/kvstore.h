// KVStore: the one interface through which training code exchanges gradients and weights.
// The training loop does not change when the type does; the user picks it with --kv-store.
//
//   KVStoreSpec spec;
//   TALLY_RETURN_IF_ERROR(ParseKVStoreType("device", &spec.type));  // --kv-store's value
//   spec.num_devices = 2;
//   std::unique_ptr<KVStore> kv;
//   TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
//   TALLY_RETURN_IF_ERROR(kv->SetOptimizer(opt));
//   TALLY_RETURN_IF_ERROR(kv->Init(key, weight));              // once per key
//   TALLY_RETURN_IF_ERROR(kv->PushPull(key, grads, weights));  // every step: one per device
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
// Capabilities only some types have (fp32 master weights, steps kept on the device) are
// separate interfaces (MasterWeightStore, DeviceStepStore) that a store hands out through
// master_weights() and device_steps(), null when it has none.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/status.h"
#include "ops/tensor.h"
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

class MasterWeightStore;
class DeviceStepStore;

class KVStore {
 public:
  // The one way to make a store of any type (KVStoreSpec). Fails, saying why, when the spec
  // cannot be met (no devices, a distributed type without a Cluster, GPUs in a build
  // without CUDA, ...).
  static Status Create(const KVStoreSpec& spec, std::unique_ptr<KVStore>* out);
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

  // Registers key with its initial value (copied). A key is registered once.
  virtual Status Init(int key, const Tensor& value) = 0;
  // Registers many keys at once. The distributed types need every key in one call (their
  // placement of keys on servers depends on all the sizes) and fail otherwise.
  virtual Status Init(const std::vector<int>& keys, const std::vector<Tensor>& values);
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

  // Checkpoints. GetOptimizerState fills (*states)[i] with a copy of key keys[i]'s optimizer
  // state (SGD momentum), fp32, shaped as the key's value: zeros before its first update,
  // an undefined tensor when the optimizer keeps none (momentum 0). The distributed types
  // read it from the servers as of the worker's last push: call it after WaitAll.
  virtual Status GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) = 0;
  // Restores what GetOptimizerState gave, after Init and before the first push. The
  // distributed types: every worker calls it (worker 0 sends, the others wait for it).
  virtual Status SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) = 0;

  // Dynamic loss scaling: from the next push on, pushed gradients are `scale` times the
  // true ones and the updates divide them back. 1 by default, which every type takes (so
  // this is no optional capability); types that cannot scale refuse any other value with a
  // message naming themselves.
  virtual Status SetGradientScale(float scale);
  // Optional capabilities (below): this store's, or null when its type has none.
  virtual MasterWeightStore* master_weights() { return nullptr; }
  virtual DeviceStepStore* device_steps() { return nullptr; }

  // Non-finite gradients (NaN, ±Inf). A key's n-th push is its step n - 1. When the summed
  // gradient of some key at step t is not finite, step t is skipped as a whole: once
  // WaitAll returns, no key keeps step t's update (keys already updated are rolled back to
  // their weights and optimizer state before it), the outputs of the step's pulls hold those
  // weights, and TakeSkippedStep reports it. dist_sync and dist_device_sync skip it on every
  // server and every worker's WaitAll reports it (docs/wire.md, "Non-finite gradients");
  // dist_async leaves out only the non-finite push. The single-process types roll back in
  // WaitAll, or at the next step's first push if WaitAll was not called.
  struct SkippedStep {
    int64_t step = -1;
    int key = -1;              // the lowest key of the step whose gradient was not finite
    std::vector<int> workers;  // dist types: workers whose own push of it was not finite
  };
  // True, once, when a step WaitAll waited for was skipped; *out says which and why.
  virtual bool TakeSkippedStep(SkippedStep* out) { return false; }

  // Stopping together (SIGTERM). After RequestStop, this worker's pushes ask the job to stop
  // after their step. StopAgreed says whether the job stops after the step last waited for:
  // single-process types once RequestStop was called; dist_sync and dist_device_sync once
  // an answer of that step carried some worker's request, which every worker sees at the
  // same step because every answer of step t waits for every worker's push of step t.
  virtual void RequestStop() { stop_requested_ = true; }
  virtual bool StopAgreed() const { return stop_requested_; }

  // For the profiler: time this store spent since the last call, in µs. pull: copying
  // pulled values into their destination; update: the optimizer (single-process types).
  // on_caller_thread: spent inside the caller's Push/Pull/PushPull calls (single-process
  // types), rather than on the store's own threads (the distributed types).
  struct Times {
    int64_t pull_us = 0;
    int64_t update_us = 0;
    bool on_caller_thread = true;
  };
  virtual Times TakeTimes() { return Times(); }

 protected:
  bool stop_requested_ = false;
};

// Fp32 master weights kept for 16-bit values (multi_precision): GPU local and device, and the
// distributed types (whose servers keep them). KVStore::master_weights() hands it out.
class MasterWeightStore {
 public:
  // Host fp32 copies of the masters, shaped as the keys' values: what a checkpoint of a
  // float16 or bfloat16 model saves.
  virtual Status GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) = 0;
  // Restores what GetMasterWeights gave (host fp32, shaped as the keys' values), after Init
  // and before the first push, so that a resumed 16-bit run continues from the exact fp32
  // weights rather than their rounded copies. The distributed types refuse: their servers
  // start from the fp32 values given to Init.
  virtual Status SetMasterWeights(const std::vector<int>& keys, const std::vector<Tensor>& values) = 0;

 protected:
  ~MasterWeightStore() = default;  // owned as the KVStore it belongs to
};

// Steps that never wait for the GPU: the GPU store of local and device only.
// KVStore::device_steps() hands it out.
class DeviceStepStore {
 public:
  // per_device[d] is the d-th device's: loss_scale (fp32 [1]) replaces SetGradientScale's
  // scale, read by the update kernel when it runs, and found (int32 [1]) is set by WaitAll
  // to 1 when the step's summed gradients are not all finite, else 0. From then on WaitAll
  // queues the sum, the finite check and an update that skips itself when the flag is set,
  // with the learning rate read from device memory, and returns without waiting for the
  // GPU; TakeSkippedStep reports nothing (the flag says it). So a whole step can be recorded
  // once as a CUDA graph and replayed. Call before the first push.
  struct DeviceStepState {
    Tensor loss_scale;
    Tensor found;
  };
  virtual Status KeepStepOnDevice(const std::vector<DeviceStepState>& per_device) = 0;

 protected:
  ~DeviceStepStore() = default;  // owned as the KVStore it belongs to
};

}  // namespace tally
