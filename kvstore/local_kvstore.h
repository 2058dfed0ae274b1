// LocalKVStore: the single-process kvstore types `local` and `device` (see kvstore.h).
// Internal to kvstore/; users create it through KVStore::Create.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvstore/comm.h"
#include "kvstore/kvstore.h"
#include "optim/updater.h"

namespace tally {

class LocalKVStore : public KVStore, public TrainerHooks {
 public:
  // update_on_devices: false gives `local` (one stored copy, updated once); true gives
  // `device` (one copy per device, each updated with the same summed gradient).
  LocalKVStore(int num_devices, bool update_on_devices);

  KVStoreType type() const override { return type_; }
  Status SetOptimizer(const OptimizerConfig& config) override;
  // `device` only, as in MXNet: each device's gradient is quantised with its own residual,
  // dequantised and summed (compressed_reduce.h); `local` refuses it.
  Status SetGradientCompression(const CompressionConfig& config) override;
  void SetLearningRate(float lr) override;
  using KVStore::Init;
  Status Init(const std::vector<int>& keys, const std::vector<Tensor>& values) override;
  Status Push(int key, const std::vector<Tensor>& vals, int priority) override;
  Status Pull(int key, const std::vector<Tensor>& outs, int priority) override;
  Status GetOptimizerState(const std::vector<int>& keys, std::vector<Tensor>* states) override;
  Status SetOptimizerState(const std::vector<int>& keys, const std::vector<Tensor>& states) override;
  TrainerHooks* trainer_hooks() override { return this; }
  // Refuses any scale but 1: the CPU stores take no loss scale.
  Status SetGradientScale(float scale) override;
  Times TakeTimes() override;
  // A step with a non-finite gradient (trainer_hooks.h): that key is not updated, nor are the
  // step's later keys; the keys updated before it are restored here from their undo copies.
  Status WaitAll() override;
  bool TakeSkippedStep(SkippedStep* out) override;

 private:
  struct Entry {
    std::vector<Tensor> copies;  // 1 (local) or num_devices_ (device)
    int64_t numel = 0;
    int64_t pushes = 0;          // the next push's step
    // One-step undo: the copies before the update of step undo_step (-1: none kept).
    std::vector<Tensor> undo;
    int64_t undo_step = -1;
    std::vector<Tensor> outs;    // the last Pull's outputs, rewritten by a rollback
    std::vector<Tensor> residuals;  // gradient compression: one per device, fp32
  };
  Status InitKey(int key, const Tensor& value);
  Status Find(int key, const std::vector<Tensor>& tensors, const char* what, Entry** entry);
  // Restores every key updated at the skipped step and rewrites its last pull's outputs.
  void RollBack();
  // outs[d] <- the copy device d pulls: the one copy (local), or its own (device).
  void CopyOut(const Entry& e, const std::vector<Tensor>& outs) const;

  // The step being skipped (step -1: none), until RollBack; then the one to report.
  SkippedStep skipping_, skipped_;
  bool has_skipped_ = false;

  const int num_devices_;
  const bool update_on_devices_;
  const KVStoreType type_;
  const std::unique_ptr<Comm> comm_;  // the devices' sum, in fp32
  std::vector<std::unique_ptr<Updater>> updaters_;  // one per copy; empty: no optimizer
  OptimizerConfig optimizer_;  // SetOptimizer's, as given: each key's wd (KeyWd)
  std::map<int, Entry> entries_;
  CompressionConfig gc_;  // SetGradientCompression
  bool pushed_ = false;   // a push has come: the compression is fixed
  Times times_;
};

}  // namespace tally
