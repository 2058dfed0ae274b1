#include "data/image_codec.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

namespace tally {
namespace {

// A smooth gradient with a few edges: compresses like a photograph, not like noise.
Image TestImage(int h, int w) {
  Image img;
  img.Resize(h, w);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.row(y) + 3 * x;
      p[0] = static_cast<uint8_t>(255 * x / w);
      p[1] = static_cast<uint8_t>(255 * y / h);
      p[2] = static_cast<uint8_t>((x / 16 + y / 16) % 2 ? 200 : 40);
    }
  }
  return img;
}

double MeanAbsDiff(const Image& a, const Image& b) {
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(int{a.pixels[i]} - int{b.pixels[i]});
  return sum / a.pixels.size();
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

TEST(ImageCodec, JpegRoundTripIsClose) {
  Image src = TestImage(120, 160);
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(src, 95, &jpeg).ok());
  EXPECT_EQ(DetectImageFormat(Bytes(jpeg), jpeg.size()), ImageFormat::kJpeg);
  ImageInfo info;
  ASSERT_TRUE(ReadImageInfo(Bytes(jpeg), jpeg.size(), &info).ok());
  EXPECT_EQ(info.width, 160);
  EXPECT_EQ(info.height, 120);
  Image out;
  ASSERT_TRUE(DecodeImage(Bytes(jpeg), jpeg.size(), DecodeOptions(), &out).ok());
  ASSERT_EQ(out.width, 160);
  ASSERT_EQ(out.height, 120);
  EXPECT_LT(MeanAbsDiff(src, out), 4.0);
}

TEST(ImageCodec, PngRoundTripIsExact) {
  Image src = TestImage(37, 53);
  std::string png;
  ASSERT_TRUE(EncodePng(src, &png).ok());
  EXPECT_EQ(DetectImageFormat(Bytes(png), png.size()), ImageFormat::kPng);
  ImageInfo info;
  ASSERT_TRUE(ReadImageInfo(Bytes(png), png.size(), &info).ok());
  EXPECT_EQ(info.width, 53);
  EXPECT_EQ(info.height, 37);
  Image out;
  ASSERT_TRUE(DecodeImage(Bytes(png), png.size(), DecodeOptions(), &out).ok());
  ASSERT_EQ(out.width, 53);
  ASSERT_EQ(out.height, 37);
  EXPECT_EQ(out.pixels, src.pixels);
}

// Single-channel files, written straight through libjpeg-turbo and libpng (EncodeJpeg and
// EncodePng only write RGB), come back as three equal channels.
TEST(ImageCodec, GrayscaleBecomesThreeEqualChannels) {
  const int h = 24, w = 40;
  std::vector<uint8_t> gray(h * w);
  for (int i = 0; i < h * w; ++i) gray[i] = static_cast<uint8_t>(i * 7);
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  ASSERT_EQ(tjCompress2(tj, gray.data(), w, 0, h, TJPF_GRAY, &jpeg, &jpeg_size, TJSAMP_GRAY, 100, 0), 0);
  tjDestroy(tj);
  Image out;
  Status s = DecodeImage(jpeg, jpeg_size, DecodeOptions(), &out);
  tjFree(jpeg);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.pixels.size(), size_t{h} * w * 3);
  for (int i = 0; i < h * w; ++i) {
    ASSERT_EQ(out.pixels[3 * i], out.pixels[3 * i + 1]);
    ASSERT_EQ(out.pixels[3 * i], out.pixels[3 * i + 2]);
    ASSERT_NEAR(out.pixels[3 * i], gray[i], 40);  // ringing at the sharp steps of i * 7
  }

  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = w;
  png.height = h;
  png.format = PNG_FORMAT_GRAY;
  std::string bytes(size_t{1} << 16, '\0');
  png_alloc_size_t size = bytes.size();
  ASSERT_TRUE(png_image_write_to_memory(&png, bytes.data(), &size, 0, gray.data(), w, nullptr));
  ASSERT_TRUE(DecodeImage(Bytes(bytes), size, DecodeOptions(), &out).ok());
  for (int i = 0; i < h * w; ++i) {
    ASSERT_EQ(out.pixels[3 * i], gray[i]);
    ASSERT_EQ(out.pixels[3 * i + 1], gray[i]);
    ASSERT_EQ(out.pixels[3 * i + 2], gray[i]);
  }
}

TEST(ImageCodec, DctScalingPicksTheSmallestSizeAboveTheMinimum) {
  Image src = TestImage(375, 500);
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(src, 90, &jpeg).ok());
  DecodeOptions opt;
  opt.power_of_two_scales_only = true;
  opt.min_width = 100;
  opt.min_height = 80;
  Image out;
  ASSERT_TRUE(DecodeImage(Bytes(jpeg), jpeg.size(), opt, &out).ok());
  EXPECT_EQ(out.width, 125);  // 1/4: 125x94; 1/8 would be 63x47, below the minimum
  EXPECT_EQ(out.height, 94);
  opt.min_width = 300;
  ASSERT_TRUE(DecodeImage(Bytes(jpeg), jpeg.size(), opt, &out).ok());
  EXPECT_EQ(out.width, 500);  // 1/2 gives 250 < 300: full size
  opt.power_of_two_scales_only = false;
  ASSERT_TRUE(DecodeImage(Bytes(jpeg), jpeg.size(), opt, &out).ok());
  EXPECT_EQ(out.width, 313);  // 5/8
  EXPECT_EQ(out.height, 235);
  // The scaled image still looks like the source, downscaled.
  opt.min_width = opt.min_height = 1;
  opt.power_of_two_scales_only = true;
  ASSERT_TRUE(DecodeImage(Bytes(jpeg), jpeg.size(), opt, &out).ok());
  EXPECT_EQ(out.width, 63);
  EXPECT_NEAR(out.row(40)[3 * 62], 255 * 62 / 63, 12);  // red grows left to right
}

TEST(ImageCodec, TruncatedJpegIsAnError) {
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(TestImage(200, 200), 90, &jpeg).ok());
  Image out;
  for (size_t keep : {jpeg.size() / 2, jpeg.size() - 10, size_t{200}, size_t{20}, size_t{3}, size_t{0}}) {
    Status s = DecodeImage(Bytes(jpeg), keep, DecodeOptions(), &out);
    EXPECT_FALSE(s.ok()) << "kept " << keep << " bytes";
  }
  // The thread's decoder recovers: the whole file still decodes after the failures.
  EXPECT_TRUE(DecodeImage(Bytes(jpeg), jpeg.size(), DecodeOptions(), &out).ok());
}

TEST(ImageCodec, GarbageIsAnErrorNotACrash) {
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
  Image out;
  EXPECT_FALSE(DecodeImage(Bytes(garbage), garbage.size(), DecodeOptions(), &out).ok());
  // A JPEG start followed by garbage, and a PNG signature followed by garbage.
  std::string jpeg_like = std::string("\xff\xd8\xff", 3) + garbage;
  EXPECT_FALSE(DecodeImage(Bytes(jpeg_like), jpeg_like.size(), DecodeOptions(), &out).ok());
  std::string png_like = std::string("\x89PNG\r\n\x1a\n", 8) + garbage;
  EXPECT_FALSE(DecodeImage(Bytes(png_like), png_like.size(), DecodeOptions(), &out).ok());
  // Corrupt the entropy-coded middle of a valid JPEG: either an error or an image, never a crash.
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(TestImage(64, 64), 90, &jpeg).ok());
  for (size_t i = jpeg.size() / 2; i < jpeg.size() / 2 + 64; ++i) jpeg[i] = static_cast<char>(0xff);
  Status s = DecodeImage(Bytes(jpeg), jpeg.size(), DecodeOptions(), &out);
  if (s.ok()) {
    EXPECT_EQ(out.pixels.size(), size_t{64} * 64 * 3);
  }
}

// Patches the height and width (big-endian) in a JPEG's SOF0 segment, walking the segments.
void SetJpegSize(std::string* jpeg, int height, int width) {
  const auto* b = reinterpret_cast<const uint8_t*>(jpeg->data());
  size_t i = 2;
  while (i + 9 < jpeg->size() && b[i] == 0xff) {
    if (b[i + 1] == 0xc0) {
      (*jpeg)[i + 5] = static_cast<char>(height >> 8);
      (*jpeg)[i + 6] = static_cast<char>(height & 0xff);
      (*jpeg)[i + 7] = static_cast<char>(width >> 8);
      (*jpeg)[i + 8] = static_cast<char>(width & 0xff);
      return;
    }
    i += 2 + (b[i + 2] << 8 | b[i + 3]);
  }
  FAIL() << "no SOF0 segment";
}

TEST(ImageCodec, AbsurdDeclaredSizeIsRefusedBeforeAllocating) {
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(TestImage(16, 16), 90, &jpeg).ok());
  SetJpegSize(&jpeg, 65000, 65000);  // 12 GB of RGB if believed
  Image out;
  Status s = DecodeImage(Bytes(jpeg), jpeg.size(), DecodeOptions(), &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("above the limit"), std::string::npos) << s;
  EXPECT_EQ(out.pixels.capacity(), 0u);

  std::string png;
  ASSERT_TRUE(EncodePng(TestImage(4, 4), &png).ok());
  png[16] = png[20] = 0x7f;  // width and height ~2^31 (the IHDR CRC no longer matches either)
  EXPECT_FALSE(DecodeImage(Bytes(png), png.size(), DecodeOptions(), &out).ok());
  EXPECT_EQ(out.pixels.capacity(), 0u);

  DecodeOptions small;
  small.max_pixels = 100;
  ASSERT_TRUE(EncodeJpeg(TestImage(16, 16), 90, &jpeg).ok());
  EXPECT_FALSE(DecodeImage(Bytes(jpeg), jpeg.size(), small, &out).ok());
}

}  // namespace
}  // namespace tally
