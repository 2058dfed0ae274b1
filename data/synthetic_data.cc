#include "data/synthetic_data.h"

namespace tally {

SyntheticData::SyntheticData(const Shape& chw, int num_classes, uint64_t seed, uint64_t stream,
                             float signal)
    : channels_(static_cast<int>(chw[0])),
      height_(static_cast<int>(chw[1])),
      width_(static_cast<int>(chw[2])),
      num_classes_(num_classes),
      templates_(static_cast<size_t>(num_classes) * kGrid * kGrid * chw[0]),
      stream_seed_(SplitMix64Hash(SplitMix64Hash(seed) ^ stream)),
      rng_(stream_seed_) {  // far-apart states: streams never overlap
  Rng t(SplitMix64Hash(seed ^ 0x7e3a9u));
  for (float& v : templates_) v = signal * t.Normal();
}

void SyntheticData::NextBatch(int batch_size, Tensor* images, Tensor* labels) {
  *images = Tensor::Empty({batch_size, height_, width_, channels_}, DType::kF32);
  *labels = Tensor::Empty({batch_size}, DType::kI32);
  float* img = images->data<float>();
  int32_t* lab = labels->data<int32_t>();
  for (int n = 0; n < batch_size; ++n) {
    int c = static_cast<int>(rng_.Below(static_cast<uint32_t>(num_classes_)));
    lab[n] = c;
    const float* tpl = &templates_[static_cast<size_t>(c) * kGrid * kGrid * channels_];
    for (int h = 0; h < height_; ++h) {
      const float* row = tpl + static_cast<size_t>(h * kGrid / height_) * kGrid * channels_;
      for (int w = 0; w < width_; ++w) {
        const float* px = row + static_cast<size_t>(w * kGrid / width_) * channels_;
        for (int ch = 0; ch < channels_; ++ch) *img++ = px[ch] + rng_.Normal();
      }
    }
  }
}

}  // namespace tally
