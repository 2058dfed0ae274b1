// The GPU half of the augmentation: Augmenter::Apply (data/augment.cc) for a whole batch
// of decoded images at once, with the same arithmetic (OpenCV's pixel-centre bilinear taps,
// horizontal pass then vertical, the colour affine map, the clamp, then (x - mean) / std).
//
//   GpuAugmentArgs args = GpuAugmentArgsFor(augmenter.params(), DType::kF16, /*channels=*/4);
//   // samples_dev: n GpuAugmentSample in device memory, each pointing at its decoded image
//   LaunchGpuAugment(samples_dev, n, grey_scratch_dev, args, out_dev, stream);
//
// The images are 8-bit interleaved RGB (HWC, rows unpadded) at full size, or the JPEG's own
// YCbCr planes as nvJPEG's NVJPEG_OUTPUT_YUV writes them (GpuDecodeTuning::yuv_output: the
// kernel converts, so no pass of nvJPEG's converts them first); the output is NHWC
// [n, data_h, data_w, channels], channel 4 (if any) zero. The kernels are compiled only with
// CUDA; FetchRgb, which reads a source pixel, also on the host, for tests.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "data/augment.h"
#include "base/dtype.h"
#include "ops/host_device.h"

namespace tally {

// One sample, as the kernel reads it (plain data, copied to the device with the batch).
struct GpuAugmentSample {
  const uint8_t* pixels = nullptr;  // the decoded image (RGB, or the Y plane), on the device
  int width = 0, height = 0;
  // Planar YCbCr when cb is set: Y is width x height, Cb and Cr chroma_w wide (rows
  // unpadded), each chroma sample covering chroma_fx x chroma_fy pixels (2 x 2 for 4:2:0).
  const uint8_t* cb = nullptr;
  const uint8_t* cr = nullptr;
  int chroma_w = 0, chroma_fx = 1, chroma_fy = 1;
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

// Source pixel (col, row) of s as RGB in 0..255. YCbCr is converted as JFIF defines it (full
// range, BT.601) and rounded and clamped to 8 bits, as a decoder writing RGB would; chroma is
// taken from the sample covering the pixel (replication, libjpeg's "fast upsampling").
TALLY_HOST_DEVICE inline void FetchRgb(const GpuAugmentSample& s, int col, int row, float rgb[3]) {
  if (s.cb == nullptr) {
    const uint8_t* p = s.pixels + (static_cast<size_t>(row) * s.width + col) * 3;
    for (int c = 0; c < 3; ++c) rgb[c] = p[c];
    return;
  }
  const size_t chroma_at = static_cast<size_t>(row / s.chroma_fy) * s.chroma_w + col / s.chroma_fx;
  const float y = s.pixels[static_cast<size_t>(row) * s.width + col];
  const float u = s.cb[chroma_at] - 128.0f, v = s.cr[chroma_at] - 128.0f;
  const float out[3] = {y + 1.402f * v, y - 0.344136f * u - 0.714136f * v, y + 1.772f * u};
  for (int c = 0; c < 3; ++c) rgb[c] = fminf(fmaxf(floorf(out[c] + 0.5f), 0.0f), 255.0f);
}

GpuAugmentArgs GpuAugmentArgsFor(const AugmentParams& params, DType dtype, int channels);
GpuAugmentSample GpuSampleFor(const AugmentPlan& plan, int width, int height, const uint8_t* pixels);

// REQUIRES: grey_scratch holds n floats on the device; out holds the whole batch.
void LaunchGpuAugment(const GpuAugmentSample* samples, int n, float* grey_scratch,
                      const GpuAugmentArgs& args, void* out, cudaStream_t stream);

}  // namespace tally
