// KVServer's side of elastic workers (--elastic; server.h, docs/faults.md "Elastic
// workers"): a leaver named by the scheduler, how far its pushes are counted here, and the
// membership by step that each step's aggregation waits for.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "base/fault_hooks.h"
#include "net/command_rules.h"
#include "server/server.h"

namespace tally {

void KVServer::SetElastic(bool keep_lr) {
  CHECK(core_.slices().empty()) << "SetElastic after INIT";
  elastic_ = true;
  keep_lr_ = keep_lr;
}

const WorkerMembership* KVServer::Members() const { return elastic_ ? &members_ : nullptr; }

void KVServer::Annotate(int64_t step, wire::Meta* answer) const {
  if (!elastic_) return;
  // The workers the values sum (a Python worker's average) and the membership they were
  // decided under, which the worker waits to have heard of (docs/wire.md).
  answer->set_num_workers(members_.Count(step, ids_.num_workers));
  answer->set_membership_epoch(membership_epoch_);
}

float KVServer::GradientScale(int64_t step, float scale) const {
  if (!elastic_ || !keep_lr_) return scale;
  const int live = members_.Count(step, ids_.num_workers);
  if (live == ids_.num_workers) return scale;
  // The pushes are each 1 / (batch x N) of a gradient: the sum of L of them, divided by
  // L / N more, is their mean again.
  return scale * (static_cast<float>(live) / static_cast<float>(ids_.num_workers));
}

Status KVServer::AdmitPush(const Message& msg) const {
  const wire::Meta& m = msg.meta;
  if (!elastic_ || (m.command() != wire::PUSH && m.command() != wire::PUSHPULL)) return Status::Ok();
  const int rank = ids_.WorkerRank(m.sender_id());
  if (leaving_.count(rank)) return Status::InvalidArgument("worker " + std::to_string(rank) + " is leaving the job");
  if (!members_.Live(rank, m.step())) {
    return Status::InvalidArgument("worker " + std::to_string(rank) + " left the job before step " +
                                   std::to_string(m.step()));
  }
  return Status::Ok();
}

bool KVServer::DroppedForTest(const wire::Meta& m) {
  const FaultHooks& hooks = FaultHooksInEffect();
  if (hooks.drop_push_step < 0 || my_rank_ != hooks.drop_push_server || m.step() < hooks.drop_push_step ||
      (m.command() != wire::PUSH && m.command() != wire::PUSHPULL) || !ids_.IsWorker(m.sender_id()) ||
      ids_.WorkerRank(m.sender_id()) != hooks.drop_push_worker) {
    return false;
  }
  if (dropped_step_ != m.step()) {
    dropped_step_ = m.step();
    LOG(WARNING) << "server: TALLY_TEST_DROP_PUSH: dropping worker " << hooks.drop_push_worker << "'s pushes of step "
                 << m.step();
  }
  return true;
}

void KVServer::PrepareMembership(const wire::Meta& m) {
  // From now on nothing of the leaver's is taken and no step applied, so that what is
  // reported stays true until the scheduler's decision. A worker not live now joins: it
  // has pushed nothing, and the steps held keep the report true likewise.
  const int rank = m.nodes(0).rank();
  const bool joins = !members_.Live(rank, std::numeric_limits<int64_t>::max());
  if (!joins) leaving_.insert(rank);
  members_.hold = !core_.async();
  int64_t through = std::numeric_limits<int64_t>::max(), applied = -1;
  const bool async = core_.async();
  for (const auto& [id, s] : core_.slices()) {
    // A backup's copy (--server-replicas) takes no pushes: its primary reports the slice.
    const int chain = Of(*s).chain;
    if (replicas_ > 0 && chain >= 0 && !async &&
        (chains_.Holders(chain).empty() || chains_.Holders(chain).front() != my_rank_)) {
      continue;
    }
    if (async) {
      applied = std::max(applied, std::max(s->applied, s->newest));
      continue;
    }
    through = std::min(through, s->pushes.CountedThrough(rank, s->applied));
    applied = std::max(applied, s->applied);
  }
  LOG(INFO) << "server: worker " << rank
            << (joins ? " joins" : " leaves: its pushes are counted through step " + std::to_string(through) +
                                        " on every slice here")
            << ", the last step applied " << applied;
  Message report;
  report.meta.set_command(wire::MEMBERSHIP_REPORT);
  report.meta.set_receiver_id(kSchedulerId);
  report.meta.set_membership_epoch(m.membership_epoch());
  report.meta.set_step(through);
  report.meta.set_applied_max(applied);
  Status s = send_(kSchedulerId, std::move(report));
  if (!s.ok()) LOG(WARNING) << "server: MEMBERSHIP_REPORT: " << s;
}

void KVServer::HandleMembership(const Message& msg) {
  const wire::Meta& m = msg.meta;
  Status r = CheckCommandSender(ids_, wire::SERVER, m);
  if (r.ok()) r = CheckNoticeFields(ids_, m);
  if (r.ok() && !elastic_) r = Status::InvalidArgument("this job is not --elastic");
  if (r.ok() && m.command() == wire::MEMBERSHIP && m.membership_epoch() <= membership_epoch_) {
    r = Status::InvalidArgument("membership epoch " + std::to_string(m.membership_epoch()) + " after epoch " +
                                std::to_string(membership_epoch_));
  }
  if (!r.ok()) {
    core_.CountRefused();
    LOG(WARNING) << "server: refused " << wire::Command_Name(m.command()) << ": " << r.message();
    return;
  }
  if (m.command() == wire::MEMBERSHIP_PREPARE) return PrepareMembership(m);
  WorkerMembership::Change change;
  change.from_step = m.step();
  change.live.assign(ids_.num_workers, false);
  for (const wire::Node& n : m.nodes()) change.live[n.rank()] = true;
  std::string gone;
  for (int rank = 0; rank < ids_.num_workers; ++rank) {
    if (change.live[rank] || !members_.Live(rank, change.from_step)) continue;
    gone += (gone.empty() ? "" : ", ") + std::to_string(rank);
    for (const auto& [id, s] : core_.slices()) s->pushes.Drop(rank, change.from_step);
  }
  for (int rank = 0; rank < ids_.num_workers; ++rank) {
    if (!change.live[rank]) leaving_.erase(rank);
  }
  if (m.skipped_step() > 0 && !core_.async()) {
    // The leaver's push of this step reached some slices only: no slice counts it.
    const int64_t skip = m.skipped_step() - 1;
    for (const auto& [id, s] : core_.slices()) {
      if (s->applied <= skip) RollBack(s.get(), skip);
    }
    core_.LogSkip(skip, -1, "a worker that left pushed it to some slices only");
  }
  membership_epoch_ = m.membership_epoch();
  members_.changes.push_back(std::move(change));
  members_.hold = !leaving_.empty();
  LOG(INFO) << "server: membership " << membership_epoch_ << ": from step " << m.step() << ", " << m.nodes_size()
            << " live workers" << (gone.empty() ? "" : "; worker " + gone + " no longer counts")
            << (m.skipped_step() > 0 ? "; step " + std::to_string(m.skipped_step() - 1) + " skipped" : "");
  if (core_.async() || members_.hold) return;
  for (const auto& [id, s] : core_.slices()) core_.ApplyReadySteps(s.get());
}

}  // namespace tally
