// `tally train`'s checkpoints: where a run resumes from (--load-epoch, --resume auto), and
// saving one with what it was made with (RunInfo), so that a resume with other settings is
// refused naming the flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace tally {

// The settings a checkpoint records, from the flags.
std::map<std::string, std::string> RunInfo(int num_workers);
// The checkpoint to resume from (--load-epoch, --resume auto), or else the weights to start
// from (--pretrained); *found false: a fresh start. *complete: --resume auto found the run
// already finished. An MXNet checkpoint of its own (no Tally metadata) at --load-epoch
// gives its weights, mapped onto `model` (MXNet's own .states is a pickle, never read).
Status FindResumePoint(int num_workers, const ModelConfig& model, Checkpoint* c, bool* found, bool* complete);
// Reads the weights of `path` (an MXNet Module checkpoint, a Gluon v1 or GluonCV v1b file,
// or a Tally .params) for `model` into c->params, c->weights_only; *notes says what it
// found, a line each. allow_new_classifier: the fc may differ in its class count and is then
// left initial.
Status ImportWeights(const std::string& path, const ModelConfig& model, bool allow_new_classifier, Checkpoint* c,
                     std::vector<std::string>* notes);
// The same for a file already read (ReadParamsFile's results), so that it is read once.
struct WeightsFile {
  std::string path;
  std::vector<NamedTensor> arrays;
  std::map<std::string, std::string> meta;
  bool foreign = false;  // an MXNet file, not one of Tally's
};
Status ReadWeightsFile(const std::string& path, WeightsFile* out);
Status ImportWeights(WeightsFile file, const ModelConfig& model, bool allow_new_classifier, Checkpoint* c,
                     std::vector<std::string>* notes);
// Saves the trainer's state as checkpoint `epoch` of --model-prefix (with PREFIX-symbol.json
// for MXNet), and says so.
Status SaveAt(Trainer* trainer, int num_workers, int64_t epoch, int64_t batch, int64_t step);
// Creates the checkpoints' directory up front, so that a bad --model-prefix fails now and
// not after the first epoch.
Status MakePrefixDirectory();

}  // namespace tally
