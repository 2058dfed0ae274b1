// BatchSource: where a training loop (worker/fit.h) gets its batches, one epoch after
// another. `tally train`'s sources (a RecordIO pack, synthetic images) implement it in
// tools/train_data.cc; tests implement it with a few lines.
//
//   std::unique_ptr<BatchSource> source = ...;
//   Tensor images, labels;
//   for (int64_t b = 0; b < source->batches_per_epoch(); ++b) {
//     TALLY_RETURN_IF_ERROR(source->Next(&images, &labels));
//     ...
//   }
//
// A source whose epochs are cut step by step over the live workers (`tally train --elastic`,
// data/elastic_reader.h) says so with elastic() and is moved to each step with Place before
// its Next: Fit then takes the epoch, its batch and length from the source.
//
// Driven by one thread.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // images [B, H, W, C] f32, labels [B] int32. The last batch of an epoch may hold fewer
  // rows for validation data (the rest of a padded batch is left out).
  virtual Status Next(Tensor* images, Tensor* labels) = 0;
  // Elastic sources: the batches of an epoch of the workers the job started with (the
  // learning-rate schedule's epoch).
  virtual int64_t batches_per_epoch() const = 0;

  // Where an elastic source's step is.
  struct Place {
    int64_t epoch = 0, batch = 0;  // the batch of the epoch
    int64_t epoch_batches = 0;     // the epoch's batches as far as known now
    // The learning-rate schedule's position: epoch * batches_per_epoch(), plus the share of
    // the epoch's examples read before this step in batches_per_epoch() units.
    int64_t lr_batch = 0;
  };
  virtual bool elastic() const { return false; }
  // Moves to the job's step `step` (the one after the last Place's) and says where it is;
  // settle() settles the step in flight and is called first when the source needs to know
  // every membership change before `step`. Next then reads that step's batch.
  virtual Status PlaceStep(int64_t step, const std::function<Status()>& settle, Place* out) {
    (void)step, (void)settle, (void)out;
    return Status::Internal("PlaceStep on a source that is not elastic");
  }
};

}  // namespace tally
