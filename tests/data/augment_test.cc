#include "data/augment.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/dtype.h"

namespace tally {
namespace {

Image Gradient(int h, int w) {
  Image img;
  img.Resize(h, w);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.row(y) + 3 * x;
      p[0] = static_cast<uint8_t>(255 * x / (w - 1));
      p[1] = static_cast<uint8_t>(255 * y / (h - 1));
      p[2] = static_cast<uint8_t>((x * 7 + y * 3) % 256);
    }
  }
  return img;
}

std::vector<float> Sample(const Augmenter& aug, const Image& img, uint64_t seed) {
  Rng rng(seed);
  AugmentPlan plan = aug.Plan(img.width, img.height, &rng);
  std::vector<float> out(aug.SampleBytes(OutputType::kF32) / sizeof(float));
  aug.Apply(img, plan, img.width, img.height, OutputType::kF32, out.data());
  return out;
}

TEST(Augment, DeterministicForASeed) {
  Augmenter aug(AugmentParams::ImageNetTrain());
  Image img = Gradient(375, 500);
  const uint64_t seed = AugmentSeed(42, 3, 1234);
  EXPECT_EQ(seed, AugmentSeed(42, 3, 1234));
  EXPECT_NE(seed, AugmentSeed(42, 4, 1234));
  EXPECT_NE(seed, AugmentSeed(42, 3, 1235));
  EXPECT_NE(seed, AugmentSeed(43, 3, 1234));
  std::vector<float> a = Sample(aug, img, seed), b = Sample(aug, img, seed);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  std::vector<float> c = Sample(aug, img, AugmentSeed(42, 3, 1235));
  EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
}

TEST(Augment, RandomResizedCropStaysInBoundsAndRanges) {
  AugmentParams p = AugmentParams::ImageNetTrain();
  Augmenter aug(p);
  const int w = 500, h = 375;
  int mirrored = 0, fallbacks = 0;
  double min_area = 1, max_area = 0;
  for (int i = 0; i < 4000; ++i) {
    Rng rng(AugmentSeed(7, 0, i));
    AugmentPlan plan = aug.Plan(w, h, &rng);
    ASSERT_GE(plan.crop_x, 0);
    ASSERT_GE(plan.crop_y, 0);
    ASSERT_LE(plan.crop_x + plan.crop_w, w);
    ASSERT_LE(plan.crop_y + plan.crop_h, h);
    const double area = plan.crop_w * plan.crop_h / (double{w} * h);
    const double aspect = plan.crop_w / plan.crop_h;
    if (plan.crop_w == w || plan.crop_h == h) {
      // A full side is either a large draw or the fallback centre crop.
      if (area > 0.95) ++fallbacks;
    } else {
      // Integer rounding of the crop moves area and aspect by a pixel's worth.
      ASSERT_GE(area, p.min_random_area - 0.005) << i;
      ASSERT_LE(aspect, p.max_aspect_ratio * 1.02) << i;
      ASSERT_GE(aspect, p.min_aspect_ratio / 1.02) << i;
    }
    min_area = std::min(min_area, area);
    max_area = std::max(max_area, area);
    mirrored += plan.mirror;
    ASSERT_GE(plan.brightness, 0.6f);
    ASSERT_LE(plan.brightness, 1.4f);
    ASSERT_GE(plan.saturation, 0.6f);
    ASSERT_LE(plan.contrast, 1.4f);
  }
  EXPECT_LT(min_area, 0.1);   // the whole range is used
  EXPECT_GT(max_area, 0.7);
  EXPECT_NEAR(mirrored, 2000, 200);
  EXPECT_LT(fallbacks, 400);
}

TEST(Augment, MirrorReversesColumns) {
  AugmentParams p;
  p.data_h = p.data_w = 64;
  p.resize = 64;
  Augmenter aug(p);
  Image img = Gradient(64, 64);
  AugmentPlan plan;
  plan.crop_w = plan.crop_h = 64;
  std::vector<uint8_t> straight(aug.SampleBytes(OutputType::kU8)), mirrored(straight.size());
  aug.Apply(img, plan, 64, 64, OutputType::kU8, straight.data());
  EXPECT_EQ(straight, img.pixels);  // an identity crop is exact
  plan.mirror = true;
  aug.Apply(img, plan, 64, 64, OutputType::kU8, mirrored.data());
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) {
      for (int c = 0; c < 3; ++c) ASSERT_EQ(mirrored[(y * 64 + x) * 3 + c], straight[(y * 64 + 63 - x) * 3 + c]);
    }
  }
}

TEST(Augment, MeanStdNormalisationIsExactOnAConstantImage) {
  Augmenter aug(AugmentParams::ImageNetVal());
  Image img;
  img.Resize(300, 400);
  for (size_t i = 0; i < img.pixels.size(); i += 3) img.pixels[i] = 10, img.pixels[i + 1] = 128, img.pixels[i + 2] = 250;
  std::vector<float> out = Sample(aug, img, 1);
  const AugmentParams& p = aug.params();
  const float want[3] = {(10 - p.mean_r) / p.std_r, (128 - p.mean_g) / p.std_g, (250 - p.mean_b) / p.std_b};
  for (size_t i = 0; i < out.size(); ++i) ASSERT_FLOAT_EQ(out[i], want[i % 3]) << i;

  // Colour jitter keeps a grey image grey; brightness scales it, clamped at 255.
  AugmentParams bright;
  bright.data_h = bright.data_w = 8;
  Augmenter jitter(bright);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = 100;
  AugmentPlan plan;
  plan.crop_w = 400, plan.crop_h = 300;
  plan.brightness = 1.3f, plan.contrast = 0.7f, plan.saturation = 1.4f;
  std::vector<float> v(jitter.SampleBytes(OutputType::kF32) / 4);
  jitter.Apply(img, plan, 400, 300, OutputType::kF32, v.data());
  for (float x : v) ASSERT_NEAR(x, 130.0f, 1e-3);  // contrast blends with the (equal) mean
  plan.brightness = 3;
  jitter.Apply(img, plan, 400, 300, OutputType::kF32, v.data());
  for (float x : v) ASSERT_EQ(x, 255.0f);

  // fp16 output matches fp32 to half precision.
  std::vector<uint16_t> half(aug.SampleBytes(OutputType::kF16) / 2);
  for (size_t i = 0; i < img.pixels.size(); i += 3) img.pixels[i] = 10, img.pixels[i + 1] = 128, img.pixels[i + 2] = 250;
  Rng rng(1);
  AugmentPlan val = aug.Plan(400, 300, &rng);
  aug.Apply(img, val, 400, 300, OutputType::kF16, half.data());
  for (size_t i = 0; i < half.size(); ++i) ASSERT_NEAR(HalfToFloat(half[i]), want[i % 3], 2e-3);
}

TEST(Augment, PcaNoiseShiftsAlongTheMainEigenvector) {
  AugmentParams p;
  p.data_h = p.data_w = 4;
  p.pca_noise = 0.1f;
  Augmenter aug(p);
  for (int i = 0; i < 50; ++i) {
    Rng rng(i);
    AugmentPlan plan = aug.Plan(10, 10, &rng);
    // The first eigenvalue dominates: its eigenvector has equal-signed components.
    ASSERT_LT(std::abs(plan.pca_rgb[0] - plan.pca_rgb[2]), std::abs(plan.pca_rgb[0]) + 2.0f);
  }
}

TEST(Augment, ValidationIsACentreCropOfAShortSideResize) {
  Augmenter aug(AugmentParams::ImageNetVal());
  Image img = Gradient(375, 500);
  Rng rng(0);
  AugmentPlan plan = aug.Plan(500, 375, &rng);
  // 500x375 -> 341x256, centre 224x224 at (58, 16), in original pixels.
  EXPECT_NEAR(plan.crop_x, 58 * 500.0 / 341, 1e-3);
  EXPECT_NEAR(plan.crop_y, 16 * 375.0 / 256, 1e-3);
  EXPECT_NEAR(plan.crop_w, 224 * 500.0 / 341, 1e-3);
  EXPECT_FALSE(plan.mirror);

  std::vector<uint8_t> out(aug.SampleBytes(OutputType::kU8));
  DecodeOptions opt = aug.DecodeOptionsFor(plan, 500, 375);
  EXPECT_EQ(opt.min_width, 341);  // the decode may shrink to 341 wide and no further
  aug.Apply(img, plan, 500, 375, OutputType::kU8, out.data());
  Image resized, cropped;
  ResizeShortEdge(img, 256, &resized);
  ASSERT_EQ(resized.width, 341);
  ASSERT_EQ(resized.height, 256);
  CenterCrop(resized, 224, 224, &cropped);
  ASSERT_EQ(out.size(), cropped.pixels.size());
  int worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(int{out[i]} - int{cropped.pixels[i]}));
  EXPECT_LE(worst, 1);  // the same sample positions; only float rounding differs
}

TEST(Augment, DctScaledDecodeGivesTheSameCrop) {
  // A 1000x750 JPEG for validation decodes at 3/8 (375x282 >= the 341x256 needed); the
  // sample matches the one from a full-size decode closely.
  Augmenter aug(AugmentParams::ImageNetVal());
  Image img = Gradient(750, 1000);
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(img, 95, &jpeg).ok());
  Rng rng(0);
  AugmentPlan plan = aug.Plan(1000, 750, &rng);
  DecodeOptions opt = aug.DecodeOptionsFor(plan, 1000, 750);
  Image scaled, full;
  const auto* bytes = reinterpret_cast<const uint8_t*>(jpeg.data());
  ASSERT_TRUE(DecodeImage(bytes, jpeg.size(), opt, &scaled).ok());
  ASSERT_TRUE(DecodeImage(bytes, jpeg.size(), DecodeOptions(), &full).ok());
  EXPECT_EQ(scaled.width, 375);
  std::vector<uint8_t> a(aug.SampleBytes(OutputType::kU8)), b(a.size());
  aug.Apply(scaled, plan, 1000, 750, OutputType::kU8, a.data());
  aug.Apply(full, plan, 1000, 750, OutputType::kU8, b.data());
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::abs(int{a[i]} - int{b[i]});
  EXPECT_LT(diff / a.size(), 3.0);
}

}  // namespace
}  // namespace tally
