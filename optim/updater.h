// Updater: applies an optimizer to the weights of many keys and owns their state (the rule's
// arrays: momentum, Adam's mean and variance, ...; its per-key scalars: the step count, the
// previous lr; and fp32 master weights for fp16/bf16 weights when multi_precision is on).
// Used wherever updates run: in the store (local), on each device (device) and on the
// servers (server/kv_server.cc). Not thread-safe: one Updater per updating thread.
//
//   Updater updater(opt);                         // OptimizerConfig (optimizer_config.h)
//   updater.set_gradient_scale(loss_scale);
//   updater.SaveState(key, weight);               // only when the step may be undone
//   updater.Update(key, summed_grad, &weight);
//   Tensor mean = updater.StateSlot(key, weight, 0);   // adam: 0 mean, 1 var, 2 count
//
// The state leaves and comes back (checkpoints, replicas, spares) as state_slots() fp32
// arrays of the weight's size each (OptimizerStateSlots), bit for bit.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "optim/optimizer_config.h"

namespace tally {

class Updater {
 public:
  // Keeps WithDefaults(config). REQUIRES: ValidateOptimizerConfig(config) is ok.
  explicit Updater(const OptimizerConfig& config);

  void set_learning_rate(float lr) { config_.lr = lr; }
  // The weight decay of the Updates from now on; the caller sets each key's (KeyWd).
  void set_wd(float wd) { config_.wd = wd; }
  // Whether the keys of the Updates from now on are ones MXNet's LARS leaves unscaled (its
  // names ending in gamma, beta or bias: --wd-exclude bn,bias's keys, OptimizerConfig::
  // no_wd_keys): lars gives them the plain lr. Other rules ignore it.
  void set_key_excluded(bool excluded) { key_excluded_ = excluded; }
  // Gradients given to Update from now on are `scale` times the true ones (dynamic loss
  // scaling); the update divides them back. 1 by default.
  void set_gradient_scale(float scale) { gradient_scale_ = scale; }
  // Whether each Update of a large fp32 weight is cut into pieces spread over the worker
  // pool (base/parallel.h) rather than left to the ops' OpenMP teams. A server sets it and
  // runs OpenMP on one thread: a team's threads spin after every update, and two servers'
  // teams beside a GPU worker on one host took the cores the transport's threads needed.
  // The arithmetic of every element is the same either way (elementwise rules; lars and
  // lamb, whose norms span the whole weight, are never cut).
  void set_spread_over_pool(bool spread) { spread_ = spread; }
  const OptimizerConfig& config() const { return config_; }

  // Applies one step of the optimizer for key: weight <- update(weight, grad).
  // REQUIRES: grad and weight have equal element counts; grad is fp32, or the weight's dtype;
  // rules other than sgd and nag need CPU tensors.
  void Update(int key, const Tensor& grad, Tensor* weight);

  // The number of arrays StateSlot numbers (OptimizerStateSlots of the config).
  int state_slots() const { return slots_; }
  // A copy of slot `slot` of key's state: fp32, {weight.numel()} (zeros before the first
  // update; a per-key scalar repeated over every element). SetStateSlot puts one back,
  // refusing a wrong size or a scalar slot whose elements differ or are out of range.
  Tensor StateSlot(int key, const Tensor& weight, int slot);
  Status SetStateSlot(int key, const Tensor& weight, int slot, const Tensor& value);
  // What SetStateSlot would refuse, for a weight of n values, without changing anything: a
  // peer's whole message is checked before any of it is applied.
  Status CheckStateSlot(int key, int64_t n, int slot, const Tensor& value) const;
  // Every slot of key, one after the other: fp32, {state_slots() * weight.numel()};
  // undefined when the rule keeps no state. SetState takes the same (or undefined when the
  // rule keeps none).
  Tensor State(int key, const Tensor& weight);
  Status SetState(int key, const Tensor& weight, const Tensor& state);

  // A one-step undo of key's optimizer state (every slot, the fp32 master), for a step
  // skipped after some of its keys were updated (a non-finite gradient found in another
  // key): SaveState copies the state as it is now, before an Update; RestoreState puts that
  // copy back and forgets it, returning false when there is none. The weight is the
  // caller's to keep. The copy is made into buffers kept from the last time, so it costs a
  // copy of the state and no allocation.
  void SaveState(int key, const Tensor& weight);
  bool RestoreState(int key);
  // SaveState and Update in one pass, for a caller that keeps its own undo copy of the
  // weights: the weights before the update are read from `before` (which the caller keeps)
  // and the updated ones written into *weight, another buffer of the same size. For sgd
  // and nag on fp32 weights nothing is copied: the state's buffers swap with the saved
  // ones and the update reads one and writes the other, as it reads `before` and writes
  // *weight. Other rules copy, then update in place. Bit for bit what SaveState and Update
  // give.
  void UpdateKeepingUndo(int key, const Tensor& grad, const Tensor& before, Tensor* weight);
  // A copy of slot `slot` of the state SaveState kept, while RestoreState has not put it
  // back; undefined otherwise (a spare server receives it with the rest, kv_server_spare.cc).
  Tensor SavedStateSlot(int key, int slot) const;

 private:
  // fn(begin, end) over [0, n): once, or (spread_) over pieces spread over the pool.
  void ForPieces(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const;

  struct Scalars {
    int64_t count = 0;   // updates applied
    float last_lr = 0;   // the lr of the last update (0: none yet)
  };
  struct KeyState {
    std::vector<Tensor> arrays;  // fp32, the rule's per-element state
    Tensor master;               // fp32 copy of a 16-bit weight under multi_precision
    Scalars scalars;
    std::vector<Tensor> saved_arrays;  // SaveState's copies
    Tensor saved_master;
    Scalars saved_scalars;
    bool saved = false;  // they hold a state RestoreState has not yet put back
  };
  KeyState& StateFor(int key, const Tensor& weight);
  // Slot i's value from arrays and scalars, as StateSlot and SavedStateSlot give it.
  Tensor SlotOf(const std::vector<Tensor>& arrays, const Scalars& scalars, int slot, int64_t n) const;
  void UpdateSgd(KeyState* s, const Tensor& grad, Tensor* weight);
  void UpdateRule(KeyState* s, const Tensor& grad, Tensor* weight);

  OptimizerConfig config_;
  int arrays_ = 0;         // LayoutOf(config_).arrays
  int slots_ = 0;          // OptimizerStateSlots(config_)
  int count_slot_ = -1;    // the slot of the step count, -1: none
  int last_lr_slot_ = -1;  // the slot of the previous lr, -1: none
  std::map<int, KeyState> states_;
  float gradient_scale_ = 1.0f;
  bool key_excluded_ = false;   // set_key_excluded
  bool spread_ = false;         // set_spread_over_pool
  std::vector<float> scratch_;  // lamb's direction
};

}  // namespace tally
