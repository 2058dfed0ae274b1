#include "data/image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>

namespace tally {
namespace {

// libjpeg-turbo compressors are not thread-safe but are cheap to keep: one per thread, made
// on first use and destroyed when the thread exits.
struct TjCompressor {
  tjhandle handle = nullptr;
  ~TjCompressor() {
    if (handle) tjDestroy(handle);
  }
};
thread_local TjCompressor tj_compressor;

// A decompressor for one image. A handle keeps the Huffman and quantisation tables of the
// images it decoded and uses them for a later image that lacks its own, and can be left
// mid-stream by a warning or an error (the next image then fails): with one handle per image
// each decode depends on its own bytes alone. Making one costs well under a microsecond.
struct Decompressor {
  tjhandle tj = tjInitDecompress();
  ~Decompressor() {
    if (tj) tjDestroy(tj);
  }
};

tjhandle Compressor() {
  if (!tj_compressor.handle) tj_compressor.handle = tjInitCompress();
  return tj_compressor.handle;
}

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

Status CheckDimensions(const ImageInfo& info, const DecodeOptions& options) {
  if (info.width <= 0 || info.height <= 0) return Status::InvalidArgument("image declares a size of 0");
  if (info.width > options.max_side || info.height > options.max_side ||
      static_cast<int64_t>(info.width) * info.height > options.max_pixels) {
    return Status::InvalidArgument("image declares " + std::to_string(info.width) + "x" +
                                   std::to_string(info.height) + " pixels, above the limit of " +
                                   std::to_string(options.max_pixels) + " pixels or " +
                                   std::to_string(options.max_side) + " per side");
  }
  return Status::Ok();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Adobe's CMYK JPEGs store inverted ink (255 = none), which is how libjpeg hands them back.
void InvertedCmykToRgb(const uint8_t* cmyk, int n, uint8_t* rgb) {
  for (int i = 0; i < n; ++i) {
    unsigned k = cmyk[4 * i + 3];
    for (int c = 0; c < 3; ++c) rgb[3 * i + c] = static_cast<uint8_t>((cmyk[4 * i + c] * k + 127) / 255);
  }
}

// Grey from RGB for files that store colour, with the integer weights of the library
// OpenCV's IMREAD_GRAYSCALE hands the work to, so that the values match. For a JPEG's CMYK:
// cvtColor's (R 4899, G 9617, B 1868) / 2^14, rounded. For PNG: libpng's rgb_to_gray with
// OpenCV's 0.299 and 0.587, which libpng truncates to /32768 weights (9797, 19234, and
// 3737 for blue, the rest of 32768) and applies without rounding. Both leave R = G = B alone.
void CvCmykGray(Image* image) {
  for (size_t i = 0; i < image->pixels.size(); i += 3) {
    uint8_t* p = &image->pixels[i];
    p[0] = p[1] = p[2] = static_cast<uint8_t>((p[0] * 4899u + p[1] * 9617u + p[2] * 1868u + 8192u) >> 14);
  }
}
void LibpngGray(Image* image) {
  for (size_t i = 0; i < image->pixels.size(); i += 3) {
    uint8_t* p = &image->pixels[i];
    p[0] = p[1] = p[2] = static_cast<uint8_t>((p[0] * 9797u + p[1] * 19234u + p[2] * 3737u) >> 15);
  }
}

// Whether libjpeg's last message is one of its warnings (jerror.h, JWRN_*): a decode that
// only warned has written every pixel. tjGetErrorCode cannot tell: once a stream has
// warned, a later fatal error (rows left unwritten) is reported as a warning too; the
// message is the fatal error's own.
bool IsJpegWarning(const std::string& what) {
  for (const char* warning : {"Corrupt JPEG data:", "Warning:", "Unknown Adobe color transform",
                              "Inconsistent progression sequence", "Invalid SOS parameters",
                              "Application transferred too many scanlines", "Premature end of JPEG file"}) {
    if (what.rfind(warning, 0) == 0) return true;
  }
  return false;
}

Status DecodeJpeg(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out) {
  Decompressor decompressor;
  tjhandle tj = decompressor.tj;
  if (!tj) return Status::Internal("tjInitDecompress failed");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, size, &width, &height, &subsamp, &colorspace) != 0) {
    return Status::InvalidArgument(std::string("corrupt JPEG header: ") + tjGetErrorStr2(tj));
  }
  ImageInfo info{ImageFormat::kJpeg, width, height};
  TALLY_RETURN_IF_ERROR(CheckDimensions(info, options));
  int out_w = 0, out_h = 0;
  ScaledSize(info, options, &out_w, &out_h);

  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  // libjpeg hands out grey (the luma plane) from YCbCr and grey files, not from CMYK.
  const bool luma = options.grayscale && !cmyk;
  const int pixel_format = cmyk ? TJPF_CMYK : luma ? TJPF_GRAY : TJPF_RGB;
  std::vector<uint8_t> staging;  // CMYK or grey pixels, before they become three channels
  if (cmyk || luma) staging.resize(static_cast<size_t>(out_w) * out_h * tjPixelSize[pixel_format]);
  out->Resize(out_h, out_w);
  uint8_t* dst = staging.empty() ? out->pixels.data() : staging.data();
  int rc = tjDecompress2(tj, data, size, dst, out_w, 0, out_h, pixel_format, 0);
  if (rc != 0) {
    std::string what = tjGetErrorStr2(tj);
    // libjpeg fills the missing part of a truncated stream with grey and calls it a warning;
    // for training data that is a broken record.
    if (tjGetErrorCode(tj) == TJERR_FATAL || !IsJpegWarning(what) || what.find("Premature end") != std::string::npos) {
      return Status::InvalidArgument("corrupt JPEG: " + what);
    }
  }
  if (cmyk) InvertedCmykToRgb(staging.data(), out_w * out_h, out->pixels.data());
  if (cmyk && options.grayscale) CvCmykGray(out);
  if (luma) {
    for (size_t i = 0; i < staging.size(); ++i) std::memset(&out->pixels[3 * i], staging[i], 3);
  }
  return Status::Ok();
}

Status DecodePng(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, size)) {
    return Status::InvalidArgument(std::string("corrupt PNG header: ") + png.message);
  }
  ImageInfo info{ImageFormat::kPng, static_cast<int>(png.width), static_cast<int>(png.height)};
  if (png.width > static_cast<png_uint_32>(options.max_side) || png.height > static_cast<png_uint_32>(options.max_side)) {
    info.width = info.height = options.max_side + 1;  // reported as over the limit below
  }
  Status s = CheckDimensions(info, options);
  if (!s.ok()) {
    png_image_free(&png);
    return s;
  }
  png.format = PNG_FORMAT_RGB;
  out->Resize(info.height, info.width);
  const png_color black = {0, 0, 0};
  if (!png_image_finish_read(&png, &black, out->pixels.data(), info.width * Image::kChannels, nullptr)) {
    std::string what = png.message;
    png_image_free(&png);
    return Status::InvalidArgument("corrupt PNG: " + what);
  }
  if (options.grayscale) LibpngGray(out);
  return Status::Ok();
}

// Fills what ImageInfo says of a PNG's samples: IHDR's bit depth and colour type, and
// whether a tRNS chunk (transparency without an alpha channel) comes before the pixels.
void ReadPngSamples(const uint8_t* data, size_t size, ImageInfo* info) {
  if (size < 26) return;  // too short to decode; DecodeImage will say so
  const int bit_depth = data[24], color_type = data[25];
  info->sixteen_bit = bit_depth == 16;
  info->channels = (color_type & 2) ? 3 : 1;  // bit 1: colour (RGB or palette)
  info->alpha = (color_type & 4) != 0;        // bit 2: an alpha channel
  for (size_t at = 33; at + 8 <= size;) {     // the chunk after IHDR (8 + 8 + 13 + 4 bytes)
    const uint64_t length = BigEndian32(data + at);
    if (std::memcmp(data + at + 4, "IDAT", 4) == 0) break;
    if (std::memcmp(data + at + 4, "tRNS", 4) == 0) info->alpha = true;
    at += 12 + length;  // length, type, data, CRC
  }
}

std::vector<uint8_t> FirstChannel(const Image& image) {
  std::vector<uint8_t> channel(static_cast<size_t>(image.width) * image.height);
  for (size_t i = 0; i < channel.size(); ++i) channel[i] = image.pixels[3 * i];
  return channel;
}

}  // namespace

ImageFormat DetectImageFormat(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::kJpeg;
  if (size >= 8 && std::memcmp(data, kPngMagic, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Status ReadImageInfo(const uint8_t* data, size_t size, ImageInfo* info) {
  *info = ImageInfo{};
  info->format = DetectImageFormat(data, size);
  switch (info->format) {
    case ImageFormat::kJpeg: {
      Decompressor decompressor;
      tjhandle tj = decompressor.tj;
      if (!tj) return Status::Internal("tjInitDecompress failed");
      int subsamp = 0, colorspace = 0;
      if (tjDecompressHeader3(tj, data, size, &info->width, &info->height, &subsamp, &colorspace) != 0) {
        return Status::InvalidArgument(std::string("corrupt JPEG header: ") + tjGetErrorStr2(tj));
      }
      info->channels = colorspace == TJCS_GRAY ? 1 : 3;
      break;
    }
    case ImageFormat::kPng: {
      // The IHDR chunk must come first: length 13, "IHDR", width, height (big-endian).
      if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) return Status::InvalidArgument("corrupt PNG header");
      uint32_t w = BigEndian32(data + 16), h = BigEndian32(data + 20);
      if (w > (1u << 30) || h > (1u << 30)) return Status::InvalidArgument("corrupt PNG header: absurd size");
      info->width = static_cast<int>(w);
      info->height = static_cast<int>(h);
      ReadPngSamples(data, size, info);
      break;
    }
    case ImageFormat::kUnknown:
      return Status::InvalidArgument("not a JPEG or PNG image (" + std::to_string(size) + " bytes)");
  }
  if (info->width <= 0 || info->height <= 0) return Status::InvalidArgument("image declares a size of 0");
  return Status::Ok();
}

void ScaledSize(const ImageInfo& info, const DecodeOptions& options, int* width, int* height) {
  *width = info.width;
  *height = info.height;
  if (info.format != ImageFormat::kJpeg || (options.min_width <= 0 && options.min_height <= 0)) return;
  int n = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&n);
  for (int i = 0; i < n; ++i) {
    const tjscalingfactor f = factors[i];
    if (f.num >= f.denom) continue;
    if (options.power_of_two_scales_only && !(f.num == 1 && (f.denom == 2 || f.denom == 4 || f.denom == 8))) continue;
    int w = TJSCALED(info.width, f), h = TJSCALED(info.height, f);
    if (w >= options.min_width && h >= options.min_height && w * int64_t{1} * h < int64_t{*width} * *height) {
      *width = w;
      *height = h;
    }
  }
}

Status DecodeImage(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out) {
  switch (DetectImageFormat(data, size)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(data, size, options, out);
    case ImageFormat::kPng:
      return DecodePng(data, size, options, out);
    case ImageFormat::kUnknown:
      break;
  }
  return Status::InvalidArgument("not a JPEG or PNG image (" + std::to_string(size) + " bytes)");
}

namespace {

// Compresses width x height pixels of the given turbojpeg format and subsampling.
Status CompressJpeg(const uint8_t* pixels, int width, int height, int format, int subsampling, int quality,
                    std::string* out) {
  tjhandle tj = Compressor();
  if (!tj) return Status::Internal("tjInitCompress failed");
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  if (tjCompress2(tj, pixels, width, 0, height, format, &jpeg, &jpeg_size, subsampling, quality, 0) != 0) {
    std::string what = tjGetErrorStr2(tj);
    tjFree(jpeg);
    return Status::Internal("JPEG encoding failed: " + what);
  }
  out->assign(reinterpret_cast<const char*>(jpeg), jpeg_size);
  tjFree(jpeg);
  return Status::Ok();
}

// Writes width x height pixels of the given libpng format (stride bytes a row) as a PNG.
Status WritePng(const uint8_t* pixels, int width, int height, png_uint_32 format, png_int_32 stride,
                std::string* out) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = width;
  png.height = height;
  png.format = format;
  png_alloc_size_t bytes = 0;
  if (!png_image_write_get_memory_size(png, bytes, 0, pixels, stride, nullptr)) {
    return Status::Internal(std::string("PNG encoding failed: ") + png.message);
  }
  out->resize(bytes);
  if (!png_image_write_to_memory(&png, out->data(), &bytes, 0, pixels, stride, nullptr)) {
    return Status::Internal(std::string("PNG encoding failed: ") + png.message);
  }
  out->resize(bytes);
  return Status::Ok();
}

}  // namespace

Status EncodeJpeg(const Image& image, int quality, std::string* out) {
  if (image.width <= 0 || image.height <= 0) return Status::InvalidArgument("EncodeJpeg: empty image");
  if (quality < 1 || quality > 100) return Status::InvalidArgument("EncodeJpeg: quality must be 1..100");
  return CompressJpeg(image.pixels.data(), image.width, image.height, TJPF_RGB, TJSAMP_420, quality, out);
}

Status EncodePng(const Image& image, std::string* out) {
  if (image.width <= 0 || image.height <= 0) return Status::InvalidArgument("EncodePng: empty image");
  return WritePng(image.pixels.data(), image.width, image.height, PNG_FORMAT_RGB, image.width * Image::kChannels, out);
}

Status EncodeGrayJpeg(const Image& image, int quality, std::string* out) {
  if (image.width <= 0 || image.height <= 0) return Status::InvalidArgument("EncodeGrayJpeg: empty image");
  if (quality < 1 || quality > 100) return Status::InvalidArgument("EncodeGrayJpeg: quality must be 1..100");
  const std::vector<uint8_t> gray = FirstChannel(image);
  return CompressJpeg(gray.data(), image.width, image.height, TJPF_GRAY, TJSAMP_GRAY, quality, out);
}

Status EncodeGrayPng(const Image& image, std::string* out) {
  if (image.width <= 0 || image.height <= 0) return Status::InvalidArgument("EncodeGrayPng: empty image");
  const std::vector<uint8_t> gray = FirstChannel(image);
  return WritePng(gray.data(), image.width, image.height, PNG_FORMAT_GRAY, image.width, out);
}

}  // namespace tally
