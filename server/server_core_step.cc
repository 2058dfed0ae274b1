// ServerCore's step: a slice's step applied once its pushes are all in (sum, update), a
// step skipped when its sum is not finite, the pulls answered once their step is visible,
// and the profiler's records (server_core.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "optim/reduce.h"
#include "profile/trace.h"
#include "server/server_core.h"

namespace tally {

int64_t CoreHooks::Visible(const ServerSlice& s) const { return s.applied; }

void ServerCore::ApplyReadySteps(ServerSlice* s) {
  bool applied = false;
  SliceAggregator::Step st;
  while (s->pushes.TakeReady(s->applied, &st)) {
    const int64_t step = s->applied + 1;
    const float scale = hooks_->GradientScale(step, st.scale);
    Tensor sum;
    if (hooks_->SkipWhenReady(s, step)) {
      Skip(s, step, {});
    } else {
      sum = Apply(s, st.grads, step, scale);
    }
    s->applied = step;
    hooks_->StepDone(s, step, sum, scale);
    st = SliceAggregator::Step();
    applied = true;
  }
  if (applied) AnswerVisible(s);
}

Tensor ServerCore::Apply(ServerSlice* s, const std::vector<Tensor>& grads, int64_t step, float scale, float lr) {
  const int64_t t0 = profile::NowUs();
  bool finite = true;  // sync: checked while summing; async steps are never skipped
  Tensor g = s->pushes.Sum(grads, async_ ? nullptr : &finite);  // the summing: slice_aggregator.h
  const int64_t t1 = profile::NowUs();
  if (!finite) {
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
    // The sum replaces the values without a copy. The old values' buffer (or, sync, the
    // one a layer hands back for them), if nothing still sends it, takes the next sum.
    Tensor old_values = std::move(s->value);
    s->value = g;
    if (!async_) hooks_->ValuesReplaced(s, step, &old_values);
    s->pushes.SumBecameValues(g, old_values);
    RecordApply(step, s->key, t0, t1, -1);
    return g;
  }
  const Tensor before = async_ ? Tensor() : hooks_->BeforeUpdate(s, step);
  if (!before.defined() && s->value.storage().use_count() > 1) {
    s->value = s->value.Clone();  // a pull answered in fp32 may still be sending these values
  }
  updater_->set_learning_rate(lr >= 0 ? lr : lr_.For(step));
  updater_->set_gradient_scale(scale);
  updater_->set_wd(s->key <= INT32_MAX ? KeyWd(optimizer_, static_cast<int>(s->key)) : optimizer_.wd);
  updater_->set_key_excluded(s->key <= INT32_MAX && optimizer_.no_wd_keys.count(static_cast<int>(s->key)) != 0);
  if (before.defined()) {
    updater_->UpdateKeepingUndo(s->id, g, before, &s->value);
  } else {
    updater_->Update(s->id, g, &s->value);
  }
  RecordApply(step, s->key, t0, t1, profile::NowUs());
  return g;
}

void ServerCore::Skip(ServerSlice* s, int64_t step, const std::vector<int>& nonfinite_ranks) {
  s->skipped = step;
  s->nonfinite_ranks = nonfinite_ranks;
}

void ServerCore::LogSkip(int64_t step, int rank, const std::string& why) {
  if (logged_skip_ == std::make_pair(step, rank)) return;
  logged_skip_ = {step, rank};
  LOG(WARNING) << "server: step " << step << " skipped: " << why;
}

void ServerCore::AnswerVisible(ServerSlice* s) {
  if (s->waiting.empty()) return;
  const int64_t visible = hooks_->Visible(*s);
  std::vector<std::shared_ptr<PendingPull>> still;
  for (auto& p : s->waiting) {
    if (p->step > visible) {
      still.push_back(std::move(p));
    } else if (--p->remaining == 0) {
      AnswerPull(*p);
      --num_waiting_;
    }
  }
  s->waiting = std::move(still);
}

void ServerCore::NoteRequest(const Message& msg) {
  const wire::Meta& m = msg.meta;
  if (!recorder_ || m.step() < 0 || (m.command() != wire::PUSH && m.command() != wire::PUSHPULL)) return;
  profile::StepRecord* r = StepLoad(m.step(), profile::NowUs());
  ++r->requests;
  for (const Tensor& t : msg.data) r->bytes_in += static_cast<int64_t>(t.nbytes());
}

void ServerCore::SetStepRecorder(std::function<void(const profile::StepRecord&)> recorder,
                               std::function<void(int64_t step)> step_begins) {
  recorder_ = std::move(recorder);
  step_begins_ = std::move(step_begins);
}

profile::StepRecord* ServerCore::StepLoad(int64_t step, int64_t now_us) {
  auto [it, fresh] = open_steps_.try_emplace(step);
  profile::StepRecord& r = it->second;
  if (fresh) {
    if (step_begins_) step_begins_(step);
    r.step = step;
    r.start_us = now_us;
    // Synchronous steps follow one another: once step t's pushes come, step t - 2 is done
    // (asynchronous ones overlap more; what is left is recorded by FlushSteps).
    while (open_steps_.begin()->first < step - 1) {
      if (recorder_) recorder_(open_steps_.begin()->second);
      open_steps_.erase(open_steps_.begin());
    }
  }
  r.dur_us = std::max(r.dur_us, now_us - r.start_us);
  return &r;
}

void ServerCore::FlushSteps() {
  if (recorder_) {
    for (const auto& [step, r] : open_steps_) recorder_(r);
  }
  open_steps_.clear();
}

void ServerCore::RecordApply(int64_t step, uint64_t key, int64_t t0, int64_t t1, int64_t t2) {
  profile::Tracer& tracer = profile::Tracer::Get();
  tracer.Complete("sum", "server", t0, t1 - t0, "key", static_cast<double>(key));
  if (t2 >= 0) tracer.Complete("update", "server", t1, t2 - t1, "key", static_cast<double>(key));
  if (!recorder_) return;
  profile::StepRecord* r = StepLoad(step, std::max(t1, t2));
  r->phase(profile::Phase::kSum) += t1 - t0;
  if (t2 >= 0) r->phase(profile::Phase::kUpdate) += t2 - t1;
}

}  // namespace tally
