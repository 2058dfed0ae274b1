// Image decoding and encoding for the data pipeline: JPEG through libjpeg-turbo (with its
// DCT-domain scaling when a much smaller image is wanted), PNG through libpng. Every image
// comes out as 8-bit RGB, rows top to bottom, pixels interleaved (HWC); grayscale, palette
// and CMYK inputs are converted to three channels, alpha is composited onto black.
//
//   ImageInfo info;
//   TALLY_RETURN_IF_ERROR(ReadImageInfo(bytes.data(), bytes.size(), &info));   // header only
//   DecodeOptions opt;
//   opt.min_width = opt.min_height = 256;   // any size >= 256x256 will do: decode at 1/2, 1/4...
//   Image img;
//   TALLY_RETURN_IF_ERROR(DecodeImage(bytes.data(), bytes.size(), opt, &img));
//   std::string jpeg;
//   TALLY_RETURN_IF_ERROR(EncodeJpeg(img, /*quality=*/90, &jpeg));
//
// Inputs come from the outside world: a truncated or corrupt stream, an unknown format or
// declared dimensions above DecodeOptions::max_pixels come back as a Status, checked before
// any pixel buffer is allocated. Nothing here crashes on bad bytes.
//
// Thread-safety: every function may be called from any number of threads at once (each
// JPEG decode has a libjpeg-turbo handle of its own, so that no table of one image reaches
// another; each thread keeps one compressor). An Image is a value with no synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally {

// An 8-bit RGB image, HWC. pixels.size() == height * width * 3.
struct Image {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;

  static constexpr int kChannels = 3;
  // Sets the size; keeps the buffer's capacity, so a reused Image stops allocating.
  void Resize(int h, int w) {
    height = h;
    width = w;
    pixels.resize(static_cast<size_t>(h) * w * kChannels);
  }
  uint8_t* row(int y) { return pixels.data() + static_cast<size_t>(y) * width * kChannels; }
  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * kChannels; }
};

enum class ImageFormat { kUnknown, kJpeg, kPng };

// What the header of an encoded image declares.
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;
  int height = 0;
  // What the file stores before any conversion: 1 (grey) or 3 (colour; a JPEG's CMYK and a
  // PNG's palette count as colour) channels, plus alpha when a PNG has an alpha channel or
  // a tRNS chunk. im2rec's --color -1 keeps what OpenCV keeps, and needs to know.
  int channels = 3;
  bool alpha = false;
  bool sixteen_bit = false;  // a PNG of 16-bit samples
};

struct DecodeOptions {
  // JPEG only: decode at the smallest of libjpeg-turbo's scaling factors (1/8 ... 1) whose
  // output is still at least min_width x min_height; 0 means full size. The IDCT then does
  // the downscaling, which is both faster and better filtered than decoding large and
  // resizing. PNG has no such scaling and always decodes at full size.
  int min_width = 0;
  int min_height = 0;
  // Only the power-of-two factors 1/2, 1/4, 1/8 (the IDCTs libjpeg-turbo vectorises on x86).
  // Off by default: the other eighths run in plain C but still decode fewer pixels, and were
  // a few per cent faster in tally bench io's training pipeline.
  bool power_of_two_scales_only = false;
  // Declared sizes above this (width * height) are refused before anything is allocated.
  // The default admits 16384 x 8192; ImageNet's largest image is about 40 Mpx smaller.
  int64_t max_pixels = int64_t{1} << 27;
  int max_side = 1 << 16;
  // Decode to grey as OpenCV's imread(IMREAD_GRAYSCALE) does, and put the grey value in all
  // three channels: a JPEG's own luma (libjpeg's grey output, no colour conversion; CMYK
  // goes through RGB), a PNG's RGB by libpng's integer rgb_to_gray with OpenCV's weights
  // 0.299 and 0.587. Grey files come out unchanged.
  bool grayscale = false;
};

ImageFormat DetectImageFormat(const uint8_t* data, size_t size);

// Reads the header only. Fails on an unknown format, a corrupt header, or dimensions of 0.
Status ReadImageInfo(const uint8_t* data, size_t size, ImageInfo* info);

// The size DecodeImage will produce for an image of `info` under `options`.
void ScaledSize(const ImageInfo& info, const DecodeOptions& options, int* width, int* height);

// Decodes a JPEG or PNG into *out (resized as needed; its buffer is reused). A truncated
// JPEG ("premature end of data") is an error even though libjpeg could fill in grey; other
// libjpeg warnings (e.g. extraneous bytes before a marker, found in a few ImageNet files)
// are tolerated, as PIL and OpenCV tolerate them.
Status DecodeImage(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out);

// Baseline JPEG, 4:2:0 chroma subsampling (what im2rec and PIL write), quality 1..100.
Status EncodeJpeg(const Image& image, int quality, std::string* out);
// 8-bit RGB PNG, lossless.
Status EncodePng(const Image& image, std::string* out);
// One-channel (greyscale) JPEG and PNG of channel 0, for images decoded with
// DecodeOptions::grayscale (whose channels are equal); what cv2.imencode writes for a
// one-channel image.
Status EncodeGrayJpeg(const Image& image, int quality, std::string* out);
Status EncodeGrayPng(const Image& image, std::string* out);

}  // namespace tally
