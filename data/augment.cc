#include "data/augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <glog/logging.h>

#include "base/dtype.h"

namespace tally {
namespace {

// AlexNet's PCA of ImageNet's RGB pixels (0-255 scale): eigenvalues, and eigenvectors as
// columns (rows are R, G, B), as used by MXNet's and fb.resnet.torch's lighting noise.
constexpr float kPcaEigval[3] = {55.46f, 4.794f, 1.148f};
constexpr float kPcaEigvec[3][3] = {{-0.5675f, 0.7192f, 0.4009f},
                                    {-0.5808f, -0.0045f, -0.8140f},
                                    {-0.5836f, -0.6948f, 0.4203f}};
constexpr float kGrey[3] = {0.299f, 0.587f, 0.114f};

float UniformIn(Rng* rng, float lo, float hi) { return lo + (hi - lo) * rng->Uniform(); }

// The source positions of output pixels along one axis: pixel i reads src[i0] and src[i1],
// blended by w (OpenCV's INTER_LINEAR mapping of pixel centres, clamped to the crop).
struct AxisTaps {
  std::vector<int> i0, i1;
  std::vector<float> w;
};

void MakeTaps(float start, float length, int out, int src_size, bool reverse, AxisTaps* taps) {
  taps->i0.resize(out);
  taps->i1.resize(out);
  taps->w.resize(out);
  const float scale = length / out;
  const float lo = std::max(0.0f, start), hi = std::min<float>(src_size - 1, start + length - 1);
  for (int i = 0; i < out; ++i) {
    float s = std::clamp(start + (i + 0.5f) * scale - 0.5f, lo, std::max(lo, hi));
    int i0 = std::min(static_cast<int>(s), src_size - 1);
    int k = reverse ? out - 1 - i : i;
    taps->i0[k] = i0;
    taps->i1[k] = std::min(i0 + 1, src_size - 1);
    taps->w[k] = s - i0;
  }
}

void ResampleRow(const uint8_t* src, const AxisTaps& x, float* dst) {
  const int n = static_cast<int>(x.w.size());
  for (int i = 0; i < n; ++i) {
    const uint8_t* a = src + 3 * x.i0[i];
    const uint8_t* b = src + 3 * x.i1[i];
    const float w = x.w[i];
    dst[3 * i + 0] = a[0] + w * (b[0] - a[0]);
    dst[3 * i + 1] = a[1] + w * (b[1] - a[1]);
    dst[3 * i + 2] = a[2] + w * (b[2] - a[2]);
  }
}

// Per-thread scratch, reused from sample to sample.
struct Scratch {
  AxisTaps x, y;
  std::vector<float> row_a, row_b, pixels;
};
thread_local Scratch scratch;

// Bilinear resampling of the crop (x, y, w, h) of img to oh x ow floats, HWC.
void ResampleCrop(const Image& img, float x, float y, float w, float h, bool mirror, int oh, int ow, float* out) {
  Scratch& s = scratch;
  MakeTaps(x, w, ow, img.width, mirror, &s.x);
  MakeTaps(y, h, oh, img.height, false, &s.y);
  s.row_a.resize(3 * ow);
  s.row_b.resize(3 * ow);
  // Vertical pass over horizontally resampled rows, keeping the last two source rows.
  float* a = s.row_a.data();
  float* b = s.row_b.data();
  int ya = -1, yb = -1;
  for (int j = 0; j < oh; ++j) {
    const int y0 = s.y.i0[j], y1 = s.y.i1[j];
    if (y0 == yb) {
      std::swap(a, b);
      std::swap(ya, yb);
    }
    if (y0 != ya) ResampleRow(img.row(y0), s.x, a), ya = y0;
    if (y1 != yb) ResampleRow(img.row(y1), s.x, b), yb = y1;
    const float wy = s.y.w[j];
    float* dst = out + size_t{3} * ow * j;
    for (int i = 0; i < 3 * ow; ++i) dst[i] = a[i] + wy * (b[i] - a[i]);
  }
}

}  // namespace

size_t OutputTypeSize(OutputType t) { return t == OutputType::kF32 ? 4 : t == OutputType::kF16 ? 2 : 1; }

AugmentParams AugmentParams::ImageNetTrain(int size) {
  AugmentParams p;
  p.data_h = p.data_w = size;
  p.random_resized_crop = true;
  p.min_random_area = 0.08f;
  p.max_random_area = 1.0f;
  p.min_aspect_ratio = 3.0f / 4.0f;
  p.max_aspect_ratio = 4.0f / 3.0f;
  p.rand_mirror = true;
  p.brightness = p.contrast = p.saturation = 0.4f;
  p.pca_noise = 0.1f;
  p.mean_r = 123.68f, p.mean_g = 116.779f, p.mean_b = 103.939f;
  p.std_r = 58.393f, p.std_g = 57.12f, p.std_b = 57.375f;
  return p;
}

AugmentParams AugmentParams::ImageNetVal(int size) {
  AugmentParams p = ImageNetTrain(size);
  p.random_resized_crop = false;
  p.rand_mirror = false;
  p.brightness = p.contrast = p.saturation = p.pca_noise = 0;
  p.resize = size == 224 ? 256 : size * 8 / 7;
  return p;
}

uint64_t AugmentSeed(uint64_t seed, int64_t epoch, int64_t record_index) {
  return SplitMix64Hash(SplitMix64Hash(SplitMix64Hash(seed) ^ static_cast<uint64_t>(epoch)) ^
                        static_cast<uint64_t>(record_index));
}

Augmenter::Augmenter(const AugmentParams& params) : params_(params) {
  CHECK_GT(params_.data_h, 0);
  CHECK_GT(params_.data_w, 0);
  CHECK(params_.min_random_area > 0 && params_.min_random_area <= params_.max_random_area);
  CHECK(params_.min_aspect_ratio > 0 && params_.min_aspect_ratio <= params_.max_aspect_ratio);
  CHECK(params_.std_r > 0 && params_.std_g > 0 && params_.std_b > 0);
}

AugmentPlan Augmenter::Plan(int src_w, int src_h, Rng* rng) const {
  CHECK(src_w > 0 && src_h > 0);
  const AugmentParams& p = params_;
  AugmentPlan plan;
  // The crop is chosen in the coordinates of the resized image (MXNet resizes first, with
  // integer sizes), then mapped back to the original.
  int rw = src_w, rh = src_h;
  if (p.resize > 0) {
    if (src_h > src_w) {
      rw = p.resize;
      rh = static_cast<int>(int64_t{p.resize} * src_h / src_w);
    } else {
      rh = p.resize;
      rw = static_cast<int>(int64_t{p.resize} * src_w / src_h);
    }
    rw = std::max(rw, 1);
    rh = std::max(rh, 1);
  }
  int cx = 0, cy = 0, cw = 0, ch = 0;
  if (p.random_resized_crop) {
    const double area = static_cast<double>(rw) * rh;
    bool found = false;
    for (int attempt = 0; attempt < 10 && !found; ++attempt) {
      double target = area * UniformIn(rng, p.min_random_area, p.max_random_area);
      double ratio = std::exp(UniformIn(rng, std::log(p.min_aspect_ratio), std::log(p.max_aspect_ratio)));
      int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
      int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
      if (w > 0 && h > 0 && w <= rw && h <= rh) {
        cw = w, ch = h;
        cx = static_cast<int>(rng->Below(rw - w + 1));
        cy = static_cast<int>(rng->Below(rh - h + 1));
        found = true;
      }
    }
    if (!found) {
      const double in_ratio = static_cast<double>(rw) / rh;
      cw = rw, ch = rh;
      if (in_ratio < p.min_aspect_ratio) ch = std::max(1, static_cast<int>(std::lround(rw / p.min_aspect_ratio)));
      if (in_ratio > p.max_aspect_ratio) cw = std::max(1, static_cast<int>(std::lround(rh * p.max_aspect_ratio)));
      cx = (rw - cw) / 2;
      cy = (rh - ch) / 2;
    }
  } else {
    cw = std::min(p.data_w, rw);
    ch = std::min(p.data_h, rh);
    if (p.rand_crop) {
      cx = static_cast<int>(rng->Below(rw - cw + 1));
      cy = static_cast<int>(rng->Below(rh - ch + 1));
    } else {
      cx = (rw - cw) / 2;
      cy = (rh - ch) / 2;
    }
  }
  const float sx = static_cast<float>(src_w) / rw, sy = static_cast<float>(src_h) / rh;
  plan.crop_x = cx * sx, plan.crop_y = cy * sy, plan.crop_w = cw * sx, plan.crop_h = ch * sy;

  if (p.rand_mirror) plan.mirror = rng->Uniform() < 0.5f;
  if (p.brightness > 0) plan.brightness = 1 + UniformIn(rng, -p.brightness, p.brightness);
  if (p.contrast > 0) plan.contrast = 1 + UniformIn(rng, -p.contrast, p.contrast);
  if (p.saturation > 0) plan.saturation = 1 + UniformIn(rng, -p.saturation, p.saturation);
  if (p.pca_noise > 0) {
    float alpha[3];
    for (float& a : alpha) a = rng->Normal() * p.pca_noise;
    for (int c = 0; c < 3; ++c) {
      plan.pca_rgb[c] = 0;
      for (int j = 0; j < 3; ++j) plan.pca_rgb[c] += kPcaEigvec[c][j] * alpha[j] * kPcaEigval[j];
    }
  }
  return plan;
}

DecodeOptions Augmenter::DecodeOptionsFor(const AugmentPlan& plan, int src_w, int src_h) const {
  DecodeOptions opt;
  if (!params_.dct_scaling) return opt;
  // The crop went through float: forgive its rounding rather than lose a scale to it.
  opt.min_width = static_cast<int>(std::ceil(static_cast<double>(params_.data_w) * src_w / plan.crop_w - 1e-3));
  opt.min_height = static_cast<int>(std::ceil(static_cast<double>(params_.data_h) * src_h / plan.crop_h - 1e-3));
  return opt;
}

void Augmenter::Apply(const Image& img, const AugmentPlan& plan, int src_w, int src_h, OutputType type,
                      void* out) const {
  CHECK(img.width > 0 && img.height > 0 && src_w > 0 && src_h > 0);
  const int ow = params_.data_w, oh = params_.data_h;
  const float fx = static_cast<float>(img.width) / src_w, fy = static_cast<float>(img.height) / src_h;
  Scratch& s = scratch;
  s.pixels.resize(size_t{3} * ow * oh);
  ResampleCrop(img, plan.crop_x * fx, plan.crop_y * fy, plan.crop_w * fx, plan.crop_h * fy, plan.mirror, oh, ow,
               s.pixels.data());

  // Colour jitter, PCA noise and normalisation as one affine map: v' = M v + t.
  double grey_mean = 0;
  if (plan.contrast != 1) {
    double sum = 0;
    for (size_t i = 0; i < s.pixels.size(); i += 3) {
      sum += kGrey[0] * s.pixels[i] + kGrey[1] * s.pixels[i + 1] + kGrey[2] * s.pixels[i + 2];
    }
    grey_mean = plan.brightness * sum / (static_cast<double>(ow) * oh);
  }
  float m[3][3], t[3];
  const float bc = plan.brightness * plan.contrast, sat = plan.saturation;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) m[r][c] = bc * ((r == c ? sat : 0) + (1 - sat) * kGrey[c]);
    t[r] = static_cast<float>((1 - plan.contrast) * grey_mean) + plan.pca_rgb[r];
  }
  const bool identity = bc == 1 && sat == 1 && t[0] == 0 && t[1] == 0 && t[2] == 0;
  const float mean[3] = {params_.mean_r, params_.mean_g, params_.mean_b};
  const float inv_std[3] = {1 / params_.std_r, 1 / params_.std_g, 1 / params_.std_b};

  std::vector<float>& px = s.pixels;
  const size_t n = px.size() / 3;
  if (!identity) {
    for (size_t i = 0; i < n; ++i) {
      const float r = px[3 * i], g = px[3 * i + 1], bl = px[3 * i + 2];
      for (int c = 0; c < 3; ++c) {
        px[3 * i + c] = std::clamp(m[c][0] * r + m[c][1] * g + m[c][2] * bl + t[c], 0.0f, 255.0f);
      }
    }
  }
  if (type == OutputType::kU8) {
    uint8_t* dst = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < 3 * n; ++i) dst[i] = static_cast<uint8_t>(std::clamp(px[i], 0.0f, 255.0f) + 0.5f);
    return;
  }
  // fp32 is written straight into the batch; fp16 goes through the scratch buffer.
  float* dst = type == OutputType::kF32 ? static_cast<float*>(out) : px.data();
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) dst[3 * i + c] = (px[3 * i + c] - mean[c]) * inv_std[c];
  }
  if (type == OutputType::kF16) FloatToHalf(px.data(), static_cast<uint16_t*>(out), px.size());
}

void ResizeBilinear(const Image& src, int out_h, int out_w, Image* out) {
  CHECK(src.width > 0 && src.height > 0 && out_h > 0 && out_w > 0);
  std::vector<float> pixels(size_t{3} * out_h * out_w);
  ResampleCrop(src, 0, 0, src.width, src.height, false, out_h, out_w, pixels.data());
  out->Resize(out_h, out_w);
  for (size_t i = 0; i < pixels.size(); ++i) out->pixels[i] = static_cast<uint8_t>(pixels[i] + 0.5f);
}

void ResizeShortEdge(const Image& src, int short_side, Image* out) {
  int w = short_side, h = short_side;
  if (src.height > src.width) {
    h = std::max(1, static_cast<int>(int64_t{short_side} * src.height / src.width));
  } else {
    w = std::max(1, static_cast<int>(int64_t{short_side} * src.width / src.height));
  }
  ResizeBilinear(src, h, w, out);
}

void CenterCrop(const Image& src, int h, int w, Image* out) {
  CHECK(h <= src.height && w <= src.width);
  const int y0 = (src.height - h) / 2, x0 = (src.width - w) / 2;
  out->Resize(h, w);
  for (int y = 0; y < h; ++y) std::copy_n(src.row(y0 + y) + 3 * x0, 3 * w, out->row(y));
}

}  // namespace tally
