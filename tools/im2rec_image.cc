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

Status PrepareImage(const std::string& path, const PackOptions& options, std::string* out) {
  std::string file;
  TALLY_RETURN_IF_ERROR(ReadWholeFile(path, size_t{1} << 28, &file));
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(file.data());
  DecodeOptions decode;
  if (options.pass_through) {
    // Only checking that the file decodes: the smallest scale reads every byte all the same.
    decode.min_width = decode.min_height = 1;
  } else if (options.resize > 0) {
    decode.min_width = decode.min_height = options.resize;
  }
  Image image;
  Status s = DecodeImage(bytes, file.size(), decode, &image);
  if (!s.ok()) return Status::InvalidArgument(path + ": " + s.message());
  if (options.pass_through) {
    *out = std::move(file);
    return Status::Ok();
  }
  if (options.center_crop) {  // the centre square, as im2rec.py cuts it
    const int side = std::min(image.width, image.height);
    Image cropped;
    CenterCrop(image, side, side, &cropped);
    image = std::move(cropped);
  }
  if (options.resize > 0 && std::min(image.width, image.height) != options.resize) {
    Image resized;
    ResizeShortEdge(image, options.resize, &resized);  // bilinear, as im2rec.py's cv2.resize
    image = std::move(resized);
  }
  s = options.encoding == ".png" ? EncodePng(image, out) : EncodeJpeg(image, options.quality, out);
  if (!s.ok()) return Status::Internal(path + ": encoding failed: " + s.message());
  return Status::Ok();
}

}  // namespace tally
