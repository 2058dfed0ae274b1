// Updater: applies an optimizer to the weights of many keys and owns their state
// (momentum, and fp32 master weights for fp16/bf16 weights when multi_precision is on).
// Used wherever updates run: in the store (local), on each device (device) and on the
// servers (server/kv_server.cc). Not thread-safe: one Updater per updating thread.
//
//   Updater updater(opt);                         // OptimizerConfig (optimizer_config.h)
//   updater.set_gradient_scale(loss_scale);
//   updater.SaveState(key, weight);               // only when the step may be undone
//   updater.Update(key, summed_grad, &weight);
#pragma once

#include <map>

#include "base/status.h"
#include "base/tensor.h"
#include "optim/optimizer_config.h"

namespace tally {

class Updater {
 public:
  explicit Updater(const OptimizerConfig& config);

  void set_learning_rate(float lr) { config_.lr = lr; }
  // The weight decay of the Updates from now on; the caller sets each key's (KeyWd).
  void set_wd(float wd) { config_.wd = wd; }
  // Gradients given to Update from now on are `scale` times the true ones (dynamic loss
  // scaling); the update divides them back. 1 by default.
  void set_gradient_scale(float scale) { gradient_scale_ = scale; }
  const OptimizerConfig& config() const { return config_; }

  // Applies one step of the optimizer for key: weight <- update(weight, grad).
  // REQUIRES: grad and weight have equal element counts; grad is fp32, or the weight's dtype.
  void Update(int key, const Tensor& grad, Tensor* weight);

  // A copy of key's momentum (fp32, weight's shape): zeros before its first update,
  // undefined when the optimizer has no momentum. SetMomentum restores it.
  Tensor Momentum(int key, const Tensor& weight);
  Status SetMomentum(int key, const Tensor& weight, const Tensor& mom);

  // A one-step undo of key's optimizer state (momentum, fp32 master), for a step skipped
  // after some of its keys were updated (a non-finite gradient found in another key):
  // SaveState copies the state as it is now, before an Update; RestoreState puts that copy
  // back and forgets it, returning false when there is none. The weight is the caller's to
  // keep. The copy is made into a buffer kept from the last time, so it costs a copy of
  // the state and no allocation.
  void SaveState(int key, const Tensor& weight);
  bool RestoreState(int key);
  // A copy of the momentum SaveState kept, while RestoreState has not put it back;
  // undefined otherwise (a spare server receives it with the rest, kv_server_replica.cc).
  Tensor SavedMomentum(int key) const;

 private:
  struct State {
    Tensor mom;     // fp32; undefined when momentum is 0
    Tensor master;  // fp32 copy of a 16-bit weight under multi_precision
    Tensor saved_mom, saved_master;  // SaveState's copies
    bool saved = false;              // they hold a state RestoreState has not yet put back
  };
  State& StateFor(int key, const Tensor& weight);

  OptimizerConfig config_;
  std::map<int, State> states_;
  float gradient_scale_ = 1.0f;
};

}  // namespace tally
