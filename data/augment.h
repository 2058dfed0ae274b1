// Image augmentation with the parameters and semantics of MXNet's ImageRecordIter
// (image_aug_default + the iterator's mean/std), producing one NHWC sample of a batch.
//
//   Augmenter aug(AugmentParams::ImageNetTrain());
//   ImageInfo info;                                   // from the encoded bytes' header
//   Rng rng(AugmentSeed(seed, epoch, record_index));  // the same sample whatever the thread
//   AugmentPlan plan = aug.Plan(info.width, info.height, &rng);
//   DecodeOptions opt = aug.DecodeOptionsFor(plan, info.width, info.height);
//   Image img;
//   TALLY_RETURN_IF_ERROR(DecodeImage(bytes, size, opt, &img));   // maybe DCT-downscaled
//   aug.Apply(img, plan, info.width, info.height, OutputType::kF32, batch_ptr + i * sample_bytes);
//
// What is done, in MXNet's order, all in the coordinates of the original image:
//   1. resize > 0: the short side is scaled to `resize` (MXNet: before any crop).
//   2. a crop: random_resized_crop (area fraction uniform in [min_random_area,
//      max_random_area], aspect ratio w/h log-uniform in [min_aspect_ratio, max_aspect_ratio],
//      up to 10 tries, then a centre crop of the largest admissible rectangle), or a
//      data_shape window, at random with rand_crop and centred otherwise; the crop is
//      resized to data_shape bilinearly (OpenCV's INTER_LINEAR: pixel centres, no
//      antialiasing). An image smaller than the window is upscaled rather than refused.
//   3. rand_mirror: a horizontal flip with probability 1/2.
//   4. brightness, contrast, saturation (each a factor 1 + U(-x, x), applied in that order;
//      contrast blends with the mean grey of the image, saturation with each pixel's grey,
//      grey = 0.299 R + 0.587 G + 0.114 B), then pca_noise: AlexNet's lighting noise,
//      eigvec * (N(0, pca_noise) * eigval) added to every pixel.
//   5. values are clamped to [0, 255] (once, after step 4, where MXNet's 8-bit images clamp
//      after each step; the two agree unless a step overshoots), then (x - mean) / std.
// Steps 2 and 3 are one resampling pass; 4 and 5 are one 3x4 affine map per pixel.
//
// Output: data_h x data_w x 3 (HWC), as fp32 or fp16 (normalised), or u8 (clamped values,
// no mean/std: normalisation is then the device's job).
//
// Thread-safety: an Augmenter is immutable after construction; Plan and Apply may run on
// any number of threads at once, each with its own Rng.
#pragma once

#include <cstdint>

#include "data/image_codec.h"
#include "ops/random.h"

namespace tally {

enum class OutputType { kF32, kF16, kU8 };
size_t OutputTypeSize(OutputType t);

struct AugmentParams {
  int data_h = 224, data_w = 224;  // MXNet's data_shape (3, h, w)
  int resize = -1;                 // short side, before cropping; <= 0: none
  bool rand_crop = false;
  bool random_resized_crop = false;
  float min_random_area = 1.0f, max_random_area = 1.0f;
  float min_aspect_ratio = 1.0f, max_aspect_ratio = 1.0f;
  bool rand_mirror = false;
  float brightness = 0, contrast = 0, saturation = 0;
  float pca_noise = 0;
  float mean_r = 0, mean_g = 0, mean_b = 0;
  float std_r = 1, std_g = 1, std_b = 1;
  // Decode JPEGs at a DCT-scaled size when the crop allows (never below the output size).
  bool dct_scaling = true;

  // area 0.08-1, aspect 3/4-4/3, mirror, jitter 0.4, pca 0.1, ImageNet mean and std.
  static AugmentParams ImageNetTrain(int size = 224);
  // Short side to 256 (for 224; size * 8 / 7 otherwise), centre crop, mean and std.
  static AugmentParams ImageNetVal(int size = 224);
};

// Everything random about one sample, drawn before decoding (the crop decides the DCT scale).
struct AugmentPlan {
  float crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;  // in original-image pixels
  bool mirror = false;
  float brightness = 1, contrast = 1, saturation = 1;    // factors; 1: unchanged
  float pca_rgb[3] = {0, 0, 0};                           // added to R, G, B
};

// The per-sample seed: a hash of (seed, epoch, record index), independent of threads.
uint64_t AugmentSeed(uint64_t seed, int64_t epoch, int64_t record_index);

class Augmenter {
 public:
  explicit Augmenter(const AugmentParams& params);
  const AugmentParams& params() const { return params_; }
  size_t SampleBytes(OutputType t) const { return size_t{3} * params_.data_h * params_.data_w * OutputTypeSize(t); }

  // REQUIRES: src_w, src_h > 0.
  AugmentPlan Plan(int src_w, int src_h, Rng* rng) const;
  // The smallest decode that still gives the crop at least data_h x data_w pixels.
  DecodeOptions DecodeOptionsFor(const AugmentPlan& plan, int src_w, int src_h) const;
  // Writes one sample to `out` (SampleBytes(type) bytes). `img` is the decoded image, maybe
  // DCT-scaled from the original src_w x src_h (the plan's crop is scaled to match).
  void Apply(const Image& img, const AugmentPlan& plan, int src_w, int src_h, OutputType type, void* out) const;

 private:
  AugmentParams params_;
};

// Helpers for packing (im2rec's --resize / --center-crop). REQUIRES: sizes > 0; out != &src.
// Bilinear with OpenCV's pixel-centre mapping, as Augmenter resamples; results are rounded.
void ResizeBilinear(const Image& src, int out_h, int out_w, Image* out);
// Scales the short side to `short_side`, the long one in proportion (rounded down, as MXNet).
void ResizeShortEdge(const Image& src, int short_side, Image* out);
// REQUIRES: h <= src.height, w <= src.width.
void CenterCrop(const Image& src, int h, int w, Image* out);

}  // namespace tally
