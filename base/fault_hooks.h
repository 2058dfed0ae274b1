// FaultHooks: the faults that tests inject into production code, in one place. Production
// code asks FaultHooksInEffect() and never reads the environment for them; a test sets
// them with SetFaultHooks, and `tally` (tools/tally_main.cc) installs what the end-to-end
// tests' TALLY_TEST_* variables ask for (tools/fault_env.h, docs/faults.md).
//
//   FaultHooks hooks;
//   hooks.nan_worker = 0;  hooks.nan_step = 2;  // worker 0's gradient is NaN at step 2
//   SetFaultHooks(hooks);
//   ... Trainer::Create(...) ...              // reads them when it starts
//   SetFaultHooks(FaultHooks());              // none again
//
// A production run has every hook off (the default). The transport's faults are part of
// the job's configuration instead (ClusterConfig::faults, TALLY_TEST_FAULTS).
//
// Thread safety: SetFaultHooks must not race with a reader. Set them before starting what
// reads them (at the start of main or of a test); the readers named below read them when
// they start or at the point of the fault.
#pragma once

#include <cstdint>
#include <string>

namespace tally {

struct FaultHooks {
  // TALLY_TEST_NAN=<worker rank>:<step>[:all]: the Trainer of worker `nan_worker` (rank 0
  // with the single-process kvstores) puts a NaN into its gradient at the job's step
  // `nan_step`: into one element of the first gradient it pushes, or, with nan_all, into
  // every element of every gradient. Read by Trainer::Create. nan_step -1: off.
  int nan_worker = -1;
  int64_t nan_step = -1;
  bool nan_all = false;
  // TALLY_TEST_CHECKPOINT_KILL_AT=1..4: the checkpoint writer raises SIGKILL after that
  // stage of its commit (docs/checkpoint.md). 0: off.
  int checkpoint_kill_at = 0;
  // TALLY_TEST_CLOCK_SKEW_US: added to the trace clock (profile::NowUs), to give one process
  // a clock that disagrees with the others'. 0: off.
  int64_t clock_skew_us = 0;
  // TALLY_TEST_DROP_PUSH=<server rank>:<worker rank>:<step>: that server takes in that
  // worker's PUSH and PUSHPULL of steps >= the step and drops them unanswered, as if they
  // were lost on the way (--elastic's leaver whose last push reached some servers only).
  // Read by KVServer. drop_push_step -1: off.
  int drop_push_server = -1, drop_push_worker = -1;
  int64_t drop_push_step = -1;
  // TALLY_TEST_READ_LOG=<directory>: under --elastic, each worker of `tally train` appends
  // a line per step to <directory>/reads-<rank>.txt: the step, epoch, batch of the epoch, the
  // pads and the positions it read (tools/train_data.h). Empty: off.
  std::string read_log;
  // TALLY_TEST_DONE_GATE=<path>: each worker of `tally train` that trained to the end waits
  // until <path> exists before it tells the scheduler it is done (WORKER_DONE), which holds
  // the job between its last step and its end (a join decided there: docs/faults.md). Empty: off.
  std::string done_gate;
};

// The hooks in effect (all off unless SetFaultHooks was called).
const FaultHooks& FaultHooksInEffect();
// Replaces the hooks in effect. REQUIRES: no thread is reading them.
void SetFaultHooks(const FaultHooks& hooks);

}  // namespace tally
