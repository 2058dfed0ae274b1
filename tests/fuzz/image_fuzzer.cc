// libFuzzer harness: hostile JPEG and PNG bytes through the image readers.
//
// Each input is an options byte (the decode's minimum size, power-of-two scales only) and
// the encoded image (layout in docs/fuzzing.md). The harness reads the header alone, then
// decodes. The size cap is lower than the loader's default (4 Mpx instead of 128 Mpx), so
// that executions go to parsing rather than to clearing huge pixel buffers; the check of
// declared sizes against the cap is the same code either way.
//
// Besides crashes, leaks and undefined behaviour, it checks: a decoded image has the size
// ScaledSize predicts from the header; decoding the same bytes again, after another image
// and into a buffer holding other values, gives the same pixels; a small decoded image
// survives a PNG round trip exactly and a JPEG one at its size.
#include <turbojpeg.h>

#include <cstdint>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "data/image_codec.h"
#include "tests/fuzz/fuzz_input.h"

namespace tally {
namespace fuzz {
namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 22;
constexpr int kMaxSide = 1 << 13;
constexpr int64_t kMaxRoundTripPixels = 64 * 64;

std::string other_image;  // decoded between the two decodes of each input

// A progressive JPEG of 16 x 8 pixels: libjpeg-turbo gives it Huffman tables of its own.
std::string ProgressiveJpeg() {
  std::vector<uint8_t> pixels(16 * 8 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 ^ i >> 3);
  tjhandle tj = tjInitCompress();
  CHECK(tj);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  CHECK_EQ(tjCompress2(tj, pixels.data(), 16, 0, 8, TJPF_RGB, &jpeg, &size, TJSAMP_444, 90, TJFLAG_PROGRESSIVE), 0);
  std::string out(reinterpret_cast<const char*>(jpeg), size);
  tjFree(jpeg);
  tjDestroy(tj);
  return out;
}

void CheckRoundTrips(const Image& img) {
  std::string png;
  CHECK(EncodePng(img, &png).ok());
  Image back;
  Status s = DecodeImage(reinterpret_cast<const uint8_t*>(png.data()), png.size(), DecodeOptions(), &back);
  CHECK(s.ok()) << "our own PNG does not decode: " << s;
  CHECK(back.height == img.height && back.width == img.width && back.pixels == img.pixels)
      << "a PNG round trip changed the image";

  std::string jpeg;
  CHECK(EncodeJpeg(img, 90, &jpeg).ok());
  s = DecodeImage(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), DecodeOptions(), &back);
  CHECK(s.ok()) << "our own JPEG does not decode: " << s;
  CHECK(back.height == img.height && back.width == img.width) << "a JPEG round trip changed the size";
}

}  // namespace

int FuzzOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t options = in.Byte();
  const std::string_view bytes = in.Rest();
  const uint8_t* image = reinterpret_cast<const uint8_t*>(bytes.data());

  ImageInfo info;
  const bool have_info = ReadImageInfo(image, bytes.size(), &info).ok();

  DecodeOptions opt;
  opt.min_width = opt.min_height = 8 * (options & 7);
  opt.power_of_two_scales_only = (options & 8) != 0;
  opt.max_pixels = kMaxPixels;
  opt.max_side = kMaxSide;
  Image img;
  if (!DecodeImage(image, bytes.size(), opt, &img).ok()) return 0;
  CHECK(img.height > 0 && img.width > 0);
  CHECK_EQ(img.pixels.size(), static_cast<size_t>(img.height) * img.width * Image::kChannels);
  if (have_info) {
    int w = 0, h = 0;
    ScaledSize(info, opt, &w, &h);
    CHECK(w == img.width && h == img.height) << "decoded " << img.width << "x" << img.height << ", but the header ("
                                             << info.width << "x" << info.height << ") says " << w << "x" << h;
  }
  // Every pixel is written, and nothing of one decode leaks into the next: the same bytes,
  // decoded again after another image (a progressive JPEG, whose Huffman tables are not
  // the standard ones) into a buffer full of other values, give the same image.
  Image other;
  CHECK(DecodeImage(reinterpret_cast<const uint8_t*>(other_image.data()), other_image.size(), DecodeOptions(), &other)
            .ok());
  Image reused;
  reused.pixels.assign(img.pixels.size(), 0xa5);
  Status again = DecodeImage(image, bytes.size(), opt, &reused);
  CHECK(again.ok()) << "decodes once, then fails: " << again;
  CHECK(reused.width == img.width && reused.height == img.height && reused.pixels == img.pixels)
      << "two decodes of the same bytes differ";
  if (int64_t{img.width} * img.height <= kMaxRoundTripPixels) CheckRoundTrips(img);
  return 0;
}

}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_logtostderr = true;
  tally::fuzz::other_image = tally::fuzz::ProgressiveJpeg();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FuzzOneInput(data, size);
}
