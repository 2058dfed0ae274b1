// `tally train`'s checkpoints: where a run resumes from (--load-epoch, --resume auto), and
// saving one with what it was made with (RunInfo), so that a resume with other settings is
// refused naming the flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ops/status.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace tally {

// The settings a checkpoint records, from the flags.
std::map<std::string, std::string> RunInfo(int num_workers);
// The checkpoint to resume from (--load-epoch, --resume auto); *found false: a fresh start.
// *complete: --resume auto found the run already finished.
Status FindResumePoint(int num_workers, Checkpoint* c, bool* found, bool* complete);
// Saves the trainer's state as checkpoint `epoch` of --model-prefix, and says so.
Status SaveAt(Trainer* trainer, int num_workers, int64_t epoch, int64_t batch, int64_t step);
// Creates the checkpoints' directory up front, so that a bad --model-prefix fails now and
// not after the first epoch.
Status MakePrefixDirectory();

}  // namespace tally
