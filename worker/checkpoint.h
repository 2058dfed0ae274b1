// Checkpoints: MXNet's file names (`prefix-0003.params`, `prefix-0003.states`). The .params
// is MXNet's NDArray file with its Module names (mx.model.load_checkpoint reads it); the
// .states is Tally's, safetensors (the layout, every tensor and key: docs/checkpoint.md).
//
//   Checkpoint c;                                  // filled by Trainer::Snapshot
//   c.epoch = 3; c.batch = 0; c.step = 1170;
//   TALLY_RETURN_IF_ERROR(SaveCheckpoint("run/m", c));   // run/m-0003.params, .states
//   int number;
//   TALLY_RETURN_IF_ERROR(LatestCheckpoint("run/m", &number));
//   Checkpoint back;
//   TALLY_RETURN_IF_ERROR(LoadCheckpoint("run/m", number, &back));
//
// A checkpoint's number is the epoch training resumes in (MXNet's: after epoch 2 ends,
// epoch 3 begins, and `--load-epoch 3` loads `-0003`). A checkpoint taken inside an epoch
// (SIGTERM) carries the epoch in progress and the batch to resume at, and takes that
// epoch's number, replacing the checkpoint of the epoch's start.
//
// Crash safety: each file is written beside its final name, fsynced and renamed, then the
// directory is fsynced, so a reader sees a whole old file or a whole new one. The pair is
// kept consistent by an id both files carry: the .states is renamed first, after its
// predecessor was linked to `.states.prev`, so at every instant some .params has a
// matching .states (the new one, or `.prev` while only the .states is new). Whatever
// instant a writer is killed at, the latest loadable checkpoint stays loadable; at worst
// the new one is not there yet.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/safetensors.h"

namespace tally {

struct Checkpoint {
  std::vector<NamedTensor> params;  // every parameter (weights, BN statistics), fp32, by name
  std::vector<NamedTensor> states;  // optimizer state (momentum) of trainable ones, by name
  // What the run was (network, num_layers, num_classes, image_shape, optimizer, kv_store,
  // batch_size, num_workers, seed, ...), as strings; checked on resume.
  std::map<std::string, std::string> info;
  int64_t epoch = 0;  // the epoch to resume in
  int64_t batch = 0;  // the batch of that epoch to resume at (0: its start)
  int64_t step = 0;   // optimizer steps done since the run began
  // Weights to start from, not a run to resume (tally train --pretrained, or an MXNet
  // checkpoint of its own): no optimizer state, and parameters absent from `params` keep
  // the network's initial values.
  bool weights_only = false;
};

// "prefix-0003.params" and "prefix-0003.states".
std::string CheckpointPath(const std::string& prefix, int64_t number, const char* extension);

// Writes checkpoint number c.epoch. Fails naming the file on a write error (disk full...),
// leaving the checkpoints already there loadable.
Status SaveCheckpoint(const std::string& prefix, const Checkpoint& c);
// Reads a .params file into Tally's names and layout: version 2 (MXNet's NDArray file with
// Tally's metadata) or version 1 (safetensors, as Tally wrote them before). *foreign: the
// file is an NDArray file without Tally's metadata (MXNet's own): `params` then holds its
// arrays as they are (ImportMxnetWeights maps them) and `metadata` is empty.
Status ReadParamsFile(const std::string& path, std::vector<NamedTensor>* params,
                      std::map<std::string, std::string>* metadata, bool* foreign);
// Reads checkpoint `number`; fails naming the file when it is missing or unreadable, or
// when the two files are not one checkpoint.
Status LoadCheckpoint(const std::string& prefix, int64_t number, Checkpoint* c);
// The highest number under prefix that loads; NotFound when there is none.
Status LatestCheckpoint(const std::string& prefix, int64_t* number);

}  // namespace tally
