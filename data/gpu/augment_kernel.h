// The GPU half of the augmentation: Augmenter::Apply (data/augment.cc) for a whole batch
// of decoded images at once, with the same arithmetic (OpenCV's pixel-centre bilinear taps,
// horizontal pass then vertical, the colour affine map, the clamp, then (x - mean) / std).
//
//   GpuAugmentArgs args = GpuAugmentArgsFor(augmenter.params(), DType::kF16, /*channels=*/4);
//   // samples_dev: n GpuAugmentSample in device memory, each pointing at its decoded image
//   LaunchGpuAugment(samples_dev, n, grey_scratch_dev, args, out_dev, stream);
//
// The images are 8-bit interleaved RGB (HWC, rows unpadded) at full size; the output is
// NHWC [n, data_h, data_w, channels], channel 4 (if any) zero. Compiled only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "data/augment.h"
#include "ops/dtype.h"

namespace tally {

// One sample, as the kernel reads it (plain data, copied to the device with the batch).
struct GpuAugmentSample {
  const uint8_t* pixels = nullptr;  // the decoded image, on the device
  int width = 0, height = 0;
  float crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  int mirror = 0;
  float brightness = 1, contrast = 1, saturation = 1;
  float pca_rgb[3] = {0, 0, 0};
};

struct GpuAugmentArgs {
  int out_h = 0, out_w = 0, channels = 3;
  DType dtype = DType::kF16;
  float mean[3] = {0, 0, 0};
  float inv_std[3] = {1, 1, 1};
  bool any_contrast = false;  // some sample's contrast != 1: the grey means are needed
};

GpuAugmentArgs GpuAugmentArgsFor(const AugmentParams& params, DType dtype, int channels);
GpuAugmentSample GpuSampleFor(const AugmentPlan& plan, int width, int height, const uint8_t* pixels);

// REQUIRES: grey_scratch holds n floats on the device; out holds the whole batch.
void LaunchGpuAugment(const GpuAugmentSample* samples, int n, float* grey_scratch,
                      const GpuAugmentArgs& args, void* out, cudaStream_t stream);

}  // namespace tally
