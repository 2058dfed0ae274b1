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
// Driven by one thread.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // images [B, H, W, C] f32, labels [B] int32. The last batch of an epoch may hold fewer
  // rows for validation data (the rest of a padded batch is left out).
  virtual Status Next(Tensor* images, Tensor* labels) = 0;
  virtual int64_t batches_per_epoch() const = 0;
};

}  // namespace tally
