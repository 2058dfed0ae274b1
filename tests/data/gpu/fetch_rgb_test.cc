// FetchRgb (data/gpu/augment_kernel.h), the augmentation kernel's read of a source pixel,
// run on the host: from the YCbCr planes of a JPEG it gives the RGB that libjpeg-turbo
// decodes from the same JPEG with replicated chroma (TJFLAG_FASTUPSAMPLE), for each
// subsampling and for odd sizes, whose last chroma sample covers fewer pixels. This is the
// GPU input path's yuv-output setting checked without a GPU; on a GPU,
// GpuLoader.MatchesCpuLoaderWithEveryDecodeTuning compares the whole path with the CPU loader.
#include <gtest/gtest.h>

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ops/random.h"

#ifdef TALLY_HAVE_NVJPEG
#include "data/gpu/augment_kernel.h"
#endif

namespace tally {
namespace {

#ifdef TALLY_HAVE_NVJPEG
// A w x h RGB image with smooth colour gradients and noise: chroma that varies pixel to pixel.
std::vector<unsigned char> Colourful(int w, int h, uint64_t seed) {
  Rng rng(seed);
  std::vector<unsigned char> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        const float v = 128 + 100 * std::sin(0.3f * x + 0.2f * y + 2.1f * c) + 20 * (rng.Uniform() - 0.5f);
        rgb[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<unsigned char>(std::fmin(std::fmax(v, 0.0f), 255.0f));
      }
    }
  }
  return rgb;
}

void CompareWithTurbo(int w, int h, int subsamp) {
  SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " subsampling " + std::to_string(subsamp));
  const std::vector<unsigned char> rgb = Colourful(w, h, static_cast<uint64_t>(w * 131 + subsamp));
  tjhandle enc = tjInitCompress(), dec = tjInitDecompress();
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  ASSERT_EQ(tjCompress2(enc, rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &jpeg_size, subsamp, 90, 0), 0) << tjGetErrorStr();
  // TurboJPEG pads the Y plane to whole chroma samples (38 wide for 37 at 4:2:0); nvJPEG
  // writes it at the image's size, as FetchRgb reads it.
  const int yw = tjPlaneWidth(0, w, subsamp), yh = tjPlaneHeight(0, h, subsamp);
  const int cw = tjPlaneWidth(1, w, subsamp), ch = tjPlaneHeight(1, h, subsamp);
  std::vector<unsigned char> padded(static_cast<size_t>(yw) * yh), cb(static_cast<size_t>(cw) * ch), cr(cb.size());
  unsigned char* planes[3] = {padded.data(), cb.data(), cr.data()};
  ASSERT_EQ(tjDecompressToYUVPlanes(dec, jpeg, jpeg_size, planes, w, nullptr, h, 0), 0) << tjGetErrorStr();
  std::vector<unsigned char> y(static_cast<size_t>(w) * h);
  for (int row = 0; row < h; ++row) {
    std::copy(padded.begin() + static_cast<size_t>(row) * yw, padded.begin() + static_cast<size_t>(row) * yw + w,
              y.begin() + static_cast<size_t>(row) * w);
  }
  std::vector<unsigned char> want(rgb.size());
  ASSERT_EQ(tjDecompress2(dec, jpeg, jpeg_size, want.data(), w, 0, h, TJPF_RGB, TJFLAG_FASTUPSAMPLE), 0);
  tjFree(jpeg);
  tjDestroy(enc);
  tjDestroy(dec);

  GpuAugmentSample s;
  s.pixels = y.data();
  s.width = w, s.height = h;
  s.cb = cb.data(), s.cr = cr.data();
  s.chroma_w = cw;
  s.chroma_fx = tjMCUWidth[subsamp] / 8, s.chroma_fy = tjMCUHeight[subsamp] / 8;
  float worst = 0;
  for (int row = 0; row < h; ++row) {
    for (int col = 0; col < w; ++col) {
      float got[3];
      FetchRgb(s, col, row, got);
      for (int c = 0; c < 3; ++c) {
        worst = std::fmax(worst, std::fabs(got[c] - want[(static_cast<size_t>(row) * w + col) * 3 + c]));
      }
    }
  }
  // libjpeg converts with fixed-point tables, FetchRgb in float: they may round apart by one.
  EXPECT_LE(worst, 1.0f);
  std::printf("%dx%d subsampling %d: largest difference %.0f\n", w, h, subsamp, worst);

  // Interleaved RGB is read as it is.
  GpuAugmentSample plain;
  plain.pixels = want.data();
  plain.width = w, plain.height = h;
  float got[3];
  FetchRgb(plain, w - 1, h - 1, got);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(got[c], want[(static_cast<size_t>(h - 1) * w + w - 1) * 3 + c]);
}

TEST(FetchRgb, YcbcrPlanesGiveTheRgbOfADecoderWithReplicatedChroma) {
  for (int subsamp : {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_440, TJSAMP_411}) {
    const int sizes[2][2] = {{64, 48}, {37, 29}};
    for (const auto& size : sizes) CompareWithTurbo(size[0], size[1], subsamp);
  }
}
#else
TEST(FetchRgb, YcbcrPlanesGiveTheRgbOfADecoderWithReplicatedChroma) {
  GTEST_SKIP() << "skipped: this build has no GPU input path (no CUDA or nvJPEG)";
}
#endif

}  // namespace
}  // namespace tally
