// `tally train --elastic`'s flags and a worker's leave (train_elastic.h).
#include "tools/train_elastic.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "base/fault_hooks.h"

DEFINE_bool(elastic, false, "with a dist_* --kv-store: a worker that dies or gets SIGTERM leaves the job and the "
            "rest go on (docs/faults.md); TALLY_ELASTIC=1 (tools/launch.py --elastic) does the same");
DEFINE_string(elastic_lr, "keep", "--elastic: after a leave, keep the learning rate (the mean over the live "
              "workers' gradients) or scale it by live workers over the starting count (linear)");
DEFINE_string(membership_replay, "", "--elastic: apply the membership changes of this membership.jsonl at the "
              "same steps, without a fault");
DECLARE_string(model_prefix);

namespace tally {

Status ElasticFlags(ElasticOptions* out) {
  const char* env = std::getenv("TALLY_ELASTIC");
  out->elastic = FLAGS_elastic || (env != nullptr && std::string(env) == "1");
  if (FLAGS_elastic_lr != "keep" && FLAGS_elastic_lr != "linear") {
    return Status::InvalidArgument("--elastic-lr " + FLAGS_elastic_lr + ": keep or linear");
  }
  out->keep_lr = FLAGS_elastic_lr == "keep";
  if (!FLAGS_membership_replay.empty() && !out->elastic) {
    return Status::InvalidArgument("--membership-replay needs --elastic");
  }
  return Status::Ok();
}

namespace {

// One line of membership.jsonl, as far as a replay needs it.
struct RecordedChange {
  int64_t epoch = 0, from_step = 0, skip_step = -1;
  std::vector<int64_t> left, joined;
};

// The ranks of `j[key]`, an array of integers; false when it is something else.
bool Ranks(const nlohmann::json& j, const char* key, std::vector<int64_t>* out) {
  if (!j.contains(key)) return true;
  if (!j[key].is_array()) return false;
  for (const auto& r : j[key]) {
    if (!r.is_number_integer()) return false;
    out->push_back(r.get<int64_t>());
  }
  return true;
}

bool Integer(const nlohmann::json& j, const char* key) { return j.contains(key) && j[key].is_number_integer(); }

Status ReadReplay(std::vector<RecordedChange>* out) {
  out->clear();
  if (FLAGS_membership_replay.empty()) return Status::Ok();
  std::ifstream in(FLAGS_membership_replay);
  if (!in) return Status::NotFound("--membership-replay " + FLAGS_membership_replay + ": cannot open it");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = "--membership-replay " + FLAGS_membership_replay + " line " + std::to_string(n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    RecordedChange c;
    if (j.is_discarded() || !j.is_object() || !Integer(j, "epoch") || !Integer(j, "from_step") ||
        (j.contains("left") == j.contains("joined")) || !Ranks(j, "left", &c.left) ||
        !Ranks(j, "joined", &c.joined) || (j.contains("skip_step") && !Integer(j, "skip_step"))) {
      return Status::InvalidArgument(where + ": not a membership change (epoch, from_step, left or joined ranks)");
    }
    c.epoch = j["epoch"].get<int64_t>();
    c.from_step = j["from_step"].get<int64_t>();
    if (j.contains("skip_step")) c.skip_step = j["skip_step"].get<int64_t>();
    if (c.from_step < 1) return Status::InvalidArgument(where + ": from_step " + std::to_string(c.from_step));
    out->push_back(std::move(c));
  }
  return Status::Ok();
}

}  // namespace

Status ReplayLeaveStep(int rank, int64_t first_step, int64_t* step, bool* rejoins) {
  *step = -1;
  *rejoins = false;
  std::vector<RecordedChange> changes;
  TALLY_RETURN_IF_ERROR(ReadReplay(&changes));
  for (const RecordedChange& c : changes) {
    const bool named = std::find(c.left.begin(), c.left.end(), rank) != c.left.end();
    if (named && c.from_step > first_step && (*step < 0 || c.from_step < *step)) *step = c.from_step;
  }
  for (const RecordedChange& c : changes) {
    const bool named = std::find(c.joined.begin(), c.joined.end(), rank) != c.joined.end();
    *rejoins |= named && *step >= 0 && c.from_step > *step;
  }
  return Status::Ok();
}

SchedulerOptions ElasticSchedulerOptions() {
  ElasticOptions e;
  SchedulerOptions o;
  o.elastic = ElasticFlags(&e).ok() && e.elastic;
  if (o.elastic && !FLAGS_model_prefix.empty()) {
    const size_t slash = FLAGS_model_prefix.rfind('/');
    o.membership_log = (slash == std::string::npos ? std::string(".") : FLAGS_model_prefix.substr(0, slash)) +
                       "/membership.jsonl";
  }
  std::vector<RecordedChange> changes;
  if (o.elastic && ReadReplay(&changes).ok()) {  // a bad file: the workers say why and fail
    for (const RecordedChange& c : changes) o.replay[c.epoch] = {c.from_step, c.skip_step};
  }
  return o;
}

double ProcessSeconds() {
  // Field 22 of /proc/self/stat: the start in clock ticks after boot; /proc/uptime: now.
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  double now = 0;
  if (paren == std::string::npos || !(uptime >> now)) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) fields >> field;  // field 3, the state, follows the name
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? now - std::strtod(field.c_str(), nullptr) / static_cast<double>(ticks) : 0;
}

void AnnounceJoin(int rank, int64_t first_step, const JoinTimes& times, FitCallbacks* callbacks) {
  std::printf("tally train: worker %d joined the job at step %lld (--elastic): the job's weights after step %lld "
              "pulled %.2f s after it %s\n",
              rank, static_cast<long long>(first_step), static_cast<long long>(first_step - 1), times.ready_s,
              times.began_s > 0 ? "began to join again" : "started");
  std::fflush(stdout);
  auto previous = callbacks->step_ends;
  auto done = std::make_shared<bool>(false);
  callbacks->step_ends = [previous, done, rank, first_step, times](const profile::StepRecord& record) {
    if (previous) previous(record);
    if (*done) return;
    *done = true;
    std::printf("tally train: worker %d's first step (%lld) done %.2f s after it %s\n", rank,
                static_cast<long long>(first_step), ProcessSeconds() - times.began_s,
                times.began_s > 0 ? "began to join again" : "started");
    std::fflush(stdout);
  };
}

SaveFn LeadsCheckpoints(Trainer* trainer, int rank, int64_t run_start, SaveFn save) {
  return [trainer, rank, run_start, save](int64_t epoch, int64_t batch, int64_t step) {
    MembershipView* view = trainer->kvstore().membership_view();
    std::vector<MembershipView::Membership> changes;
    TALLY_RETURN_IF_ERROR(view->HeardMembership(&changes));
    if (MembershipView::LeadAt(changes, step - 1 - run_start, trainer->kvstore().num_workers()) != rank) {
      return Status::Ok();
    }
    return save(epoch, batch, step);
  };
}

bool EndedBeforeItsFirstStep(const Cluster* cluster, const Status& s) {
  if (cluster == nullptr || cluster->joined_after_epoch() == 0 ||
      s.message().find(kEndedBeforeItsFirstStep) == std::string::npos) {
    return false;
  }
  std::printf("tally train: worker %d joined the running job, but %s: nothing to train\n", cluster->me().rank(),
              s.message().c_str());
  std::fflush(stdout);
  return true;
}

void WaitForDoneGate() {
  const std::string& gate = FaultHooksInEffect().done_gate;
  if (gate.empty()) return;
  std::printf("tally train: TALLY_TEST_DONE_GATE: waiting for %s before saying this worker is done\n", gate.c_str());
  std::fflush(stdout);
  while (access(gate.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

Status LeaveJob(Cluster* cluster, int64_t step) {
  Message m;
  m.meta.set_command(wire::LEAVE);
  m.meta.set_step(step);
  TALLY_RETURN_IF_ERROR(cluster->Send(kSchedulerId, std::move(m)));
  return cluster->Finish(/*timeout_ms=*/60000);
}

}  // namespace tally
