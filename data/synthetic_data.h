// SyntheticData: labelled image batches made in memory, for runs without a data set
// (`tally train` with no --data-train, and `--benchmark 1`).
//
//   SyntheticData data({3, 32, 32}, /*num_classes=*/10, /*seed=*/0);
//   data.NextBatch(128, &images, &labels);   // images [128, 32, 32, 3] f32, labels [128] i32
//
// The images are learnable, so a run shows its accuracy rising: each class has a fixed
// coarse 8x8 colour template, upsampled to the image size, plus unit gaussian noise.
// Deterministic for a seed. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/random.h"
#include "base/tensor.h"

namespace tally {

class SyntheticData {
 public:
  // Streams of one seed share the class templates and differ in their images (stream 0 for
  // training, 1 for validation).
  // signal: the templates' standard deviation under unit noise. The default is faint, so a
  // class takes a ResNet a few epochs to see.
  SyntheticData(const Shape& image_shape_chw, int num_classes, uint64_t seed, uint64_t stream = 0,
                float signal = 0.15f);
  void NextBatch(int batch_size, Tensor* images, Tensor* labels);
  // Makes the next batches those of position `position` of the stream (a batch number):
  // a run resumed at a batch draws the images the uninterrupted run drew there.
  void Seek(uint64_t position) { rng_ = Rng(SplitMix64Hash(stream_seed_ ^ SplitMix64Hash(position + 1))); }

 private:
  static constexpr int kGrid = 8;
  int channels_, height_, width_, num_classes_;
  std::vector<float> templates_;  // [class][kGrid][kGrid][channel]
  uint64_t stream_seed_;
  Rng rng_;
};

}  // namespace tally
