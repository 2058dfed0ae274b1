// KVServer's rollback (server.h, docs/wire.md): every synchronous update keeps a one-step
// undo copy of the values and optimizer state, which a worker's ROLLBACK (a non-finite
// gradient on another slice of that step) puts back; a step rolled back before its pushes
// are all in is skipped when it comes.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/server.h"

namespace tally {

bool KVServer::SkipWhenReady(ServerSlice* s, int64_t step) {
  return Of(*s).skip_when_ready.erase(step) > 0;  // rolled back before it could be applied
}

Tensor KVServer::BeforeUpdate(ServerSlice* s, int64_t step) {
  Recovery& r = Of(*s);
  // The values become the undo copy as they are, and the update writes into the buffer the
  // last undo copy held (a fresh one while something still sends it): no copy each step.
  // A pull answered in fp32 may still be sending the values: they are only read from now.
  Tensor before = std::move(s->value);
  const bool reusable = r.undo.defined() && r.undo.storage().use_count() == 1 && r.undo.numel() == s->length;
  s->value = reusable ? std::move(r.undo) : Tensor::Empty({s->length}, DType::kF32);
  r.undo = before;
  r.undo_step = step;
  return before;  // the optimizer's state: Updater::UpdateKeepingUndo keeps its own undo copy
}

void KVServer::ValuesReplaced(ServerSlice* s, int64_t step, Tensor* old_values) {
  // Without an optimizer the sum became the values: the old ones, whole, are the undo copy,
  // and the buffer that copy held goes back to the core for the next sum.
  Recovery& r = Of(*s);
  std::swap(*old_values, r.undo);
  r.undo_step = step;
}

void KVServer::RollBack(ServerSlice* s, int64_t step) {
  Recovery& r = Of(*s);
  // Idempotent: every worker asks, and only the first finds anything to undo.
  bool changed = false;
  if (s->applied < step) {
    changed = r.skip_when_ready.insert(step).second;
  } else {
    if (r.undo_step == step) {
      std::swap(s->value, r.undo);  // the update's values become the spare buffer
      if (core_.updater() != nullptr) core_.updater()->RestoreState(s->id);
      r.undo_step = -1;
    }
    changed = s->skipped != step;
    if (changed) core_.Skip(s, step, {});
  }
  if (changed) ResendState(*s);
}

Status KVServer::HandleRollback(const Message& msg) {
  const wire::Meta& m = msg.meta;
  const int64_t step = m.step();
  if (core_.async()) return Status::InvalidArgument("dist_async rolls nothing back");
  if (step < 0) return Status::InvalidArgument("step " + std::to_string(step) + " is negative");
  std::vector<ServerSlice*> slices;
  TALLY_RETURN_IF_ERROR(core_.FindSlices(msg, &slices));
  for (ServerSlice* s : slices) {
    if (s->applied > step) {
      return Status::InvalidArgument("step " + std::to_string(s->applied) + " of key " + std::to_string(s->key) +
                                     " is applied: only the last step applied can be rolled back");
    }
  }
  for (ServerSlice* s : slices) RollBack(s, step);
  core_.LogSkip(step, -1, "rolled back at worker " + std::to_string(ids_.WorkerRank(m.sender_id())) +
                              "'s request (a non-finite gradient elsewhere)");
  return core_.HandlePull(msg);
}

}  // namespace tally
