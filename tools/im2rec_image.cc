#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data/augment.h"
#include "tools/im2rec.h"

namespace tally {

Status ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  std::streamoff size = in.tellg();
  if (size < 0) return Status::IoError("cannot read " + path);
  if (static_cast<uint64_t>(size) > max_bytes) {
    return Status::InvalidArgument(path + " is " + std::to_string(size) + " bytes, more than the " +
                                   std::to_string(max_bytes) + " accepted");
  }
  out->resize(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(out->data(), size)) return Status::IoError("reading " + path + " failed");
  return Status::Ok();
}

void PackedSize(const PackOptions& options, int width, int height, int* out_width, int* out_height) {
  if (options.center_crop) width = height = std::min(width, height);
  *out_width = width;
  *out_height = height;
  if (options.resize <= 0) return;
  // im2rec.py: if h > w the width becomes `resize`, else the height does. MXNet would fail on
  // a side that rounds to 0 (cv2.resize refuses it); here it is one pixel.
  const int64_t r = options.resize;
  if (height > width) {
    *out_width = options.resize;
    *out_height = static_cast<int>(std::max<int64_t>(1, height * r / width));
  } else {
    *out_width = static_cast<int>(std::max<int64_t>(1, width * r / height));
    *out_height = options.resize;
  }
}

namespace {

// --color -1 packs what cv2.IMREAD_UNCHANGED reads. Tally's decoder gives 8-bit grey or
// colour, which is that for most files; alpha and 16-bit samples it cannot keep.
Status CheckUnchanged(const std::string& path, const ImageInfo& info) {
  if (info.alpha) {
    return Status::InvalidArgument(path + ": --color -1 would keep its alpha channel (cv2.IMREAD_UNCHANGED), "
                                   "which tally im2rec cannot; pack it with --color 1 or --pass-through");
  }
  if (info.sixteen_bit) {
    return Status::InvalidArgument(path + ": --color -1 would keep its 16-bit samples (cv2.IMREAD_UNCHANGED), "
                                   "which tally im2rec cannot; pack it with --color 1 or --pass-through");
  }
  return Status::Ok();
}

}  // namespace

Status PrepareImage(const std::string& path, const PackOptions& options, std::string* out) {
  std::string file;
  TALLY_RETURN_IF_ERROR(ReadWholeFile(path, size_t{1} << 28, &file));
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(file.data());
  ImageInfo info;
  Status s = ReadImageInfo(bytes, file.size(), &info);
  if (!s.ok()) return Status::InvalidArgument(path + ": " + s.message());
  DecodeOptions decode;
  Image image;
  if (options.pass_through) {
    // Only checking that the file decodes: the smallest scale reads every byte all the same.
    decode.min_width = decode.min_height = 1;
    s = DecodeImage(bytes, file.size(), decode, &image);
    if (!s.ok()) return Status::InvalidArgument(path + ": " + s.message());
    *out = std::move(file);
    return Status::Ok();
  }
  if (options.color == -1) TALLY_RETURN_IF_ERROR(CheckUnchanged(path, info));
  decode.grayscale = options.color == 0 || (options.color == -1 && info.channels == 1);
  // The size comes from the full image, as MXNet computes it; a JPEG may then be decoded
  // at a DCT scale that is still at least that size, and resized the rest of the way.
  int width = 0, height = 0;
  PackedSize(options, info.width, info.height, &width, &height);
  if (options.resize > 0) {
    decode.min_width = width;
    decode.min_height = height;
  }
  s = DecodeImage(bytes, file.size(), decode, &image);
  if (!s.ok()) return Status::InvalidArgument(path + ": " + s.message());
  if (options.center_crop) {  // the centre square, as im2rec.py cuts it
    const int side = std::min(image.width, image.height);
    Image cropped;
    CenterCrop(image, side, side, &cropped);
    image = std::move(cropped);
  }
  if (image.width != width || image.height != height) {
    Image resized;
    ResizeBilinear(image, height, width, &resized);  // as im2rec.py's cv2.resize
    image = std::move(resized);
  }
  const bool png = options.encoding == ".png";
  if (decode.grayscale) {
    s = png ? EncodeGrayPng(image, out) : EncodeGrayJpeg(image, options.quality, out);
  } else {
    s = png ? EncodePng(image, out) : EncodeJpeg(image, options.quality, out);
  }
  if (!s.ok()) return Status::Internal(path + ": encoding failed: " + s.message());
  return Status::Ok();
}

}  // namespace tally
