// KVServer's steps: applying a step's summed pushes to a slice, the one-step undo copy, and
// skipping a step whose gradient is not finite or rolling it back (server.h, docs/wire.md).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "optim/reduce.h"
#include "profile/trace.h"
#include "server/kv_server_slice.h"
#include "server/server.h"

namespace tally {

void KVServer::ApplyReadySteps(Slice* s) {
  bool applied = false;
  SliceAggregator::Step st;
  while (s->pushes.TakeReady(s->applied, &st)) {
    const int64_t step = s->applied + 1;
    const float scale = ElasticScale(step, st.scale);  // kv_server_elastic.cc
    Tensor sum;
    if (s->skip_when_ready.erase(step) > 0) {
      Skip(s, step, {});  // rolled back before it could be applied
    } else {
      sum = Apply(s, st.grads, step, scale);
    }
    s->applied = step;
    Forward(s, step, sum, scale);  // --server-replicas: to the backups
    st = SliceAggregator::Step();
    applied = true;
  }
  if (applied) AnswerVisible(s);
}

Tensor KVServer::Apply(Slice* s, const std::vector<Tensor>& grads, int64_t step, float scale, float lr) {
  const int64_t t0 = profile::NowUs();
  Tensor g = s->pushes.Sum(grads);  // the summing: slice_aggregator.h
  const int64_t t1 = profile::NowUs();
  if (!async_ && !AllFinite(g)) {
    std::vector<int> ranks;
    std::string who;
    for (size_t r = 0; r < grads.size(); ++r) {
      if (AllFinite(grads[r])) continue;
      ranks.push_back(static_cast<int>(r));
      who += (who.empty() ? "" : ", ") + std::to_string(r);
    }
    Skip(s, step, ranks);
    LogSkip(step, -1, "the summed gradient of key " + std::to_string(s->key) + " [" + std::to_string(s->offset) +
                          ", +" + std::to_string(s->length) + ") is not finite: " +
                          (who.empty() ? std::string("the sum overflowed") : "NaN/Inf from worker " + who));
    RecordApply(step, s->key, t0, t1, -1);
    return g;
  }
  if (!updater_) {
    // The sum replaces the values without a copy. Sync keeps the old values whole as the
    // undo copy; the buffer that copy held, if nothing still sends it, takes the next sum.
    Tensor spare = std::move(s->value);
    s->value = g;
    if (!async_) {
      std::swap(spare, s->undo);
      s->undo_step = step;
    }
    s->pushes.SumBecameValues(g, spare);
    RecordApply(step, s->key, t0, t1, -1);
    return g;
  }
  if (!async_) {
    KeepUndo(s, step);
  } else if (s->value.storage().use_count() > 1) {
    s->value = s->value.Clone();  // a pull answered in fp32 may still be sending these values
  }
  updater_->set_learning_rate(lr >= 0 ? lr : lr_.For(step));
  updater_->set_gradient_scale(scale);
  updater_->set_wd(s->key <= INT32_MAX ? KeyWd(optimizer_, static_cast<int>(s->key)) : optimizer_.wd);
  updater_->set_key_excluded(s->key <= INT32_MAX && optimizer_.no_wd_keys.count(static_cast<int>(s->key)) != 0);
  updater_->Update(s->id, g, &s->value);
  RecordApply(step, s->key, t0, t1, profile::NowUs());
  return g;
}

void KVServer::KeepUndo(Slice* s, int64_t step) {
  if (s->value.storage().use_count() > 1) {
    // A pull answered in fp32 may still be sending these values: they become the undo
    // copy as they are, and the update writes into a fresh copy.
    s->undo = s->value;
    s->value = s->value.Clone();
  } else {
    if (!s->undo.defined() || s->undo.storage().use_count() > 1) s->undo = Tensor::Empty({s->length}, DType::kF32);
    s->undo.CopyFrom(s->value);
  }
  updater_->SaveState(s->id, s->value);
  s->undo_step = step;
}

void KVServer::Skip(Slice* s, int64_t step, const std::vector<int>& nonfinite_ranks) {
  s->skipped = step;
  s->nonfinite_ranks = nonfinite_ranks;
}

void KVServer::LogSkip(int64_t step, int rank, const std::string& why) {
  if (logged_skip_ == std::make_pair(step, rank)) return;
  logged_skip_ = {step, rank};
  LOG(WARNING) << "server: step " << step << " skipped: " << why;
}

void KVServer::RollBack(Slice* s, int64_t step) {
  // Idempotent: every worker asks, and only the first finds anything to undo.
  bool changed = false;
  if (s->applied < step) {
    changed = s->skip_when_ready.insert(step).second;
  } else {
    if (s->undo_step == step) {
      std::swap(s->value, s->undo);  // the update's values become the spare buffer
      if (updater_) updater_->RestoreState(s->id);
      s->undo_step = -1;
    }
    changed = s->skipped != step;
    if (changed) Skip(s, step, {});
  }
  if (changed) ResendState(s);
}

Status KVServer::HandleRollback(const Message& msg) {
  const wire::Meta& m = msg.meta;
  const int64_t step = m.step();
  if (async_) return Status::InvalidArgument("dist_async rolls nothing back");
  if (step < 0) return Status::InvalidArgument("step " + std::to_string(step) + " is negative");
  std::vector<Slice*> slices;
  TALLY_RETURN_IF_ERROR(FindSlices(msg, &slices));
  for (Slice* s : slices) {
    if (s->applied > step) {
      return Status::InvalidArgument("step " + std::to_string(s->applied) + " of key " + std::to_string(s->key) +
                                     " is applied: only the last step applied can be rolled back");
    }
  }
  for (Slice* s : slices) RollBack(s, step);
  LogSkip(step, -1, "rolled back at worker " + std::to_string(ids_.WorkerRank(m.sender_id())) +
                        "'s request (a non-finite gradient elsewhere)");
  return HandlePull(msg);
}

void KVServer::RecordApply(int64_t step, uint64_t key, int64_t t0, int64_t t1, int64_t t2) {
  profile::Tracer& tracer = profile::Tracer::Get();
  tracer.Complete("sum", "server", t0, t1 - t0, "key", static_cast<double>(key));
  if (t2 >= 0) tracer.Complete("update", "server", t1, t2 - t1, "key", static_cast<double>(key));
  if (!recorder_) return;
  profile::StepRecord* r = StepLoad(step, std::max(t1, t2));
  r->phase(profile::Phase::kSum) += t1 - t0;
  if (t2 >= 0) r->phase(profile::Phase::kUpdate) += t2 - t1;
}

}  // namespace tally
