// `tally train --elastic`: a worker that leaves the job, and the flags every role reads
// (docs/faults.md, "Elastic workers").
//
//   ElasticOptions e;
//   TALLY_RETURN_IF_ERROR(ElasticFlags(&e));           // --elastic, --elastic-lr
//   int64_t leave_at = -1;                              // --membership-replay: this rank's step
//   bool rejoins = false;                               // ... and whether it joins again
//   TALLY_RETURN_IF_ERROR(ReplayLeaveStep(rank, /*first_step=*/0, &leave_at, &rejoins));
//   ...  // Fit returns FitResult::left before step result.steps
//   TALLY_RETURN_IF_ERROR(LeaveJob(cluster, result.steps));  // LEAVE, then the scheduler's SHUTDOWN
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "net/cluster.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "worker/fit.h"
#include "worker/trainer.h"

namespace tally {

// --elastic (or TALLY_ELASTIC=1, which tools/launch.py --elastic sets) and --elastic-lr;
// fails naming the flag when --elastic-lr is neither keep nor linear, or when
// --membership-replay is given without --elastic.
Status ElasticFlags(ElasticOptions* out);

// The scheduler's options: --elastic, and membership.jsonl in --model-prefix's directory.
SchedulerOptions ElasticSchedulerOptions();

// --membership-replay FILE: the step before which worker `rank`, whose first step is
// `first_step` (0, or a join's from_step), leaves, as the run that wrote FILE decided it
// (-1: it does not leave), and whether a later change of FILE has it join again: then this
// process joins the job again after its leave, as a new process would (docs/faults.md,
// "Replay"). Fails naming the file and line of a malformed line.
Status ReplayLeaveStep(int rank, int64_t first_step, int64_t* step, bool* rejoins);

// Seconds since this process started (/proc/self/stat; 0 when unreadable).
double ProcessSeconds();

// A joining worker's figures, in ProcessSeconds: when it began to join (0: at the process's
// start; later, a --membership-replay's worker joining again) and when its weights were in
// (seconds after that).
struct JoinTimes {
  double began_s = 0, ready_s = 0;
};

// A worker that joined the running job at `first_step`: prints so ("tally train: worker 2
// joined the job at step 71 (--elastic) ..."), with its weights' time, and once its first
// step is done, that step's time after it began to join.
void AnnounceJoin(int rank, int64_t first_step, const JoinTimes& times, FitCallbacks* callbacks);

// --elastic: the checkpoints are the lead's (the lowest live rank), as this worker heard the
// changes up to the step before the checkpoint's (Fit settled it, so it heard every one): a
// job whose worker 0 left goes on saving, and a worker 0 that joined again saves from its
// join (docs/faults.md, "The lead"). `save` wrapped so that it saves on the lead alone.
// run_start: the run's first step in the job's count (a change's from_step counts the run's).
using SaveFn = std::function<Status(int64_t epoch, int64_t batch, int64_t step)>;
SaveFn LeadsCheckpoints(Trainer* trainer, int rank, int64_t run_start, SaveFn save);

// A worker that joined the running job and was told (the scheduler's SHUTDOWN, `s` its
// failure) that the job's last step came before its first: a join decided between the last
// step and the job's end, with nothing to train. True, having said so: it exits 0. False for
// any other failure.
bool EndedBeforeItsFirstStep(const Cluster* cluster, const Status& s);

// TALLY_TEST_DONE_GATE (tests only, base/fault_hooks.h): waits until its file exists, before
// a worker that trained to the end tells the scheduler so. Returns at once when unset.
void WaitForDoneGate();

// This worker leaves the job before `step`: it tells the scheduler (LEAVE) and waits for
// the change to be decided (the scheduler's SHUTDOWN to it).
Status LeaveJob(Cluster* cluster, int64_t step);

}  // namespace tally
