// `tally train --elastic`: a worker that leaves the job, and the flags every role reads
// (docs/faults.md, "Elastic workers").
//
//   ElasticOptions e;
//   TALLY_RETURN_IF_ERROR(ElasticFlags(&e));           // --elastic, --elastic-lr
//   int64_t leave_at = -1;                              // --membership-replay: this rank's step
//   TALLY_RETURN_IF_ERROR(ReplayLeaveStep(rank, &leave_at));
//   ...  // Fit returns FitResult::left before step result.steps
//   TALLY_RETURN_IF_ERROR(LeaveJob(cluster, result.steps));  // LEAVE, then the scheduler's SHUTDOWN
#pragma once

#include <cstdint>
#include <string>

#include "net/cluster.h"
#include "scheduler/scheduler.h"
#include "server/server.h"

namespace tally {

// --elastic (or TALLY_ELASTIC=1, which tools/launch.py --elastic sets) and --elastic-lr;
// fails naming the flag when --elastic-lr is neither keep nor linear, or when
// --membership-replay is given without --elastic.
Status ElasticFlags(ElasticOptions* out);

// The scheduler's options: --elastic, and membership.jsonl in --model-prefix's directory.
SchedulerOptions ElasticSchedulerOptions();

// --membership-replay FILE: the step before which worker `rank` leaves, as the run that
// wrote FILE decided it (-1: it does not leave). Fails naming the file and line of a
// malformed line.
Status ReplayLeaveStep(int rank, int64_t* step);

// This worker leaves the job before `step`: it tells the scheduler (LEAVE) and waits for
// the change to be decided (the scheduler's SHUTDOWN to it).
Status LeaveJob(Cluster* cluster, int64_t step);

}  // namespace tally
