// Where `tally train` gets its batches: a RecordIO pack through the Loader (--data-train,
// --data-val, MXNet's names), or synthetic learnable images when no pack is given.
#pragma once

#include <memory>

#include "worker/batch_source.h"
#include "worker/trainer.h"

namespace tally {

// Where a run starts reading: the batch of an epoch (a resumed run: the checkpoint's).
struct DataPosition {
  int64_t epoch = 0, batch = 0;
};

// The training source of worker `rank` of `workers` (its shard of the pack), or a synthetic
// one, starting at `start`. Each batch depends only on (seed, rank, epoch, batch), so a
// resumed run reads what the uninterrupted one read. Fails naming the flag for a missing
// file or a shape that does not fit the model.
Status MakeTrainSource(const TrainerConfig& cfg, int rank, int workers, const DataPosition& start,
                       std::unique_ptr<BatchSource>* out);
// The validation source (every worker sees all of it); nullptr when there is none.
Status MakeValSource(const TrainerConfig& cfg, std::unique_ptr<BatchSource>* out);

}  // namespace tally
