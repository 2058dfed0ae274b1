// Where `tally train` gets its batches: a RecordIO pack through the Loader (--data-train,
// --data-val, MXNet's names), or synthetic learnable images when no pack is given.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "data/elastic_reader.h"
#include "kvstore/kvstore.h"
#include "worker/batch_source.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace tally {

// Where a run starts reading: the batch of an epoch (a resumed run: the checkpoint's).
struct DataPosition {
  int64_t epoch = 0, batch = 0;
  // --elastic: the job's step there, the checkpoint's info (its "membership" and
  // "num_workers", docs/checkpoint.md) and the store that hears the membership changes.
  int64_t step = 0;
  std::map<std::string, std::string> info;
  KVStore* kv = nullptr;
};
// A run's start at checkpoint `resume` (a fresh one: the default Checkpoint) of `trainer`.
DataPosition DataPositionOf(const Checkpoint& resume, Trainer* trainer);

// The training source of worker `rank` of `workers` (its shard of the pack), or a synthetic
// one, starting at `start`. Each batch depends only on (seed, rank, epoch, batch), so a
// resumed run reads what the uninterrupted one read. Fails naming the flag for a missing
// file or a shape that does not fit the model.
//
// --elastic (tally train's flag, or TALLY_ELASTIC=1): the source is elastic
// (BatchSource::PlaceStep): each step's batch is at the positions data/elastic_reader.h gives
// this rank, mapped through the epoch's order (a pack's EpochPermutation; the synthetic
// set's examples in their stream order: workers x batches x batch of them, the same batches
// as without --elastic until the workers change), so that each epoch reads every example
// once across leaves and joins. Worker 0 writes where the run starts to PREFIX-run.json
// (--model-prefix); a worker joining the running job starts its cut from there.
Status MakeTrainSource(const TrainerConfig& cfg, int rank, int workers, const DataPosition& start,
                       std::unique_ptr<BatchSource>* out);
// The validation source (every worker sees all of it); nullptr when there is none.
Status MakeValSource(const TrainerConfig& cfg, std::unique_ptr<BatchSource>* out);

// --elastic: the data position of a checkpoint taken at step `step` (the elastic training
// source's record: info["membership"], docs/checkpoint.md). Nothing without an elastic source.
Status AddElasticCheckpointInfo(int64_t step, std::map<std::string, std::string>* info);

// The elastic training source (tools/train_data_elastic.cc): `examples` examples an epoch,
// step `step`'s batch (at: its epoch and positions) read through `read` into images and labels.
using ExampleReadFn = std::function<Status(const ElasticReader& reader, const ElasticStep& at, int64_t step,
                                           Tensor* images, Tensor* labels)>;
Status MakeElasticSource(int rank, int workers, int64_t examples, int batch_size, const DataPosition& start,
                         ExampleReadFn read, std::unique_ptr<BatchSource>* out);

}  // namespace tally
