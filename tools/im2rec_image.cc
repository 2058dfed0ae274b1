#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

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

namespace {

// For each output sample, the first input sample it reads and its normalised weights.
struct Taps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;  // count[o] weights per output, at offsets[o]
  std::vector<size_t> offsets;
};

Taps MakeTaps(int in, int out) {
  Taps t;
  const double scale = static_cast<double>(in) / out;
  const double support = std::max(1.0, scale);
  for (int o = 0; o < out; ++o) {
    const double center = (o + 0.5) * scale;
    int lo = std::max(0, static_cast<int>(std::floor(center - support)));
    int hi = std::min(in, static_cast<int>(std::ceil(center + support)));
    t.offsets.push_back(t.weights.size());
    double sum = 0;
    for (int i = lo; i < hi; ++i) {
      double w = std::max(0.0, 1.0 - std::fabs((i + 0.5 - center) / support));
      t.weights.push_back(static_cast<float>(w));
      sum += w;
    }
    if (sum <= 0) {  // a sample between pixels at the very edge: take the nearest
      t.weights.resize(t.offsets.back());
      lo = std::min(in - 1, std::max(0, static_cast<int>(center)));
      hi = lo + 1;
      t.weights.push_back(1.0f);
      sum = 1;
    }
    for (size_t k = t.offsets.back(); k < t.weights.size(); ++k) t.weights[k] = static_cast<float>(t.weights[k] / sum);
    t.first.push_back(lo);
    t.count.push_back(hi - lo);
  }
  return t;
}

}  // namespace

void ResizeImage(const Image& in, int width, int height, Image* out) {
  const int c = Image::kChannels;
  const Taps tx = MakeTaps(in.width, width), ty = MakeTaps(in.height, height);
  // Rows first (in.height x width), then columns.
  std::vector<float> rows(static_cast<size_t>(in.height) * width * c);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    float* dst = rows.data() + static_cast<size_t>(y) * width * c;
    for (int x = 0; x < width; ++x) {
      float acc[3] = {0, 0, 0};
      const float* w = tx.weights.data() + tx.offsets[x];
      for (int k = 0; k < tx.count[x]; ++k) {
        const uint8_t* p = src + static_cast<size_t>(tx.first[x] + k) * c;
        for (int ch = 0; ch < c; ++ch) acc[ch] += w[k] * p[ch];
      }
      for (int ch = 0; ch < c; ++ch) dst[x * c + ch] = acc[ch];
    }
  }
  out->Resize(height, width);
  for (int y = 0; y < height; ++y) {
    uint8_t* dst = out->row(y);
    const float* w = ty.weights.data() + ty.offsets[y];
    for (int x = 0; x < width * c; ++x) {
      float acc = 0;
      for (int k = 0; k < ty.count[y]; ++k) acc += w[k] * rows[static_cast<size_t>(ty.first[y] + k) * width * c + x];
      dst[x] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, acc + 0.5f)));
    }
  }
}

// The centre square, as im2rec.py's --center-crop cuts it.
static void CenterCrop(const Image& in, Image* out) {
  const int side = std::min(in.width, in.height);
  const int top = (in.height - side) / 2, left = (in.width - side) / 2;
  out->Resize(side, side);
  for (int y = 0; y < side; ++y) {
    std::memcpy(out->row(y), in.row(top + y) + static_cast<size_t>(left) * Image::kChannels,
                static_cast<size_t>(side) * Image::kChannels);
  }
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
  if (options.center_crop) {
    Image cropped;
    CenterCrop(image, &cropped);
    image = std::move(cropped);
  }
  if (options.resize > 0) {
    // im2rec.py: the short edge becomes `resize`, the long one keeps the aspect (floored).
    int w = options.resize, h = options.resize;
    if (image.height > image.width) {
      h = static_cast<int>(static_cast<int64_t>(image.height) * options.resize / image.width);
    } else {
      w = static_cast<int>(static_cast<int64_t>(image.width) * options.resize / image.height);
    }
    if (w != image.width || h != image.height) {
      Image resized;
      ResizeImage(image, std::max(1, w), std::max(1, h), &resized);
      image = std::move(resized);
    }
  }
  s = options.encoding == ".png" ? EncodePng(image, out) : EncodeJpeg(image, options.quality, out);
  if (!s.ok()) return Status::Internal(path + ": encoding failed: " + s.message());
  return Status::Ok();
}

}  // namespace tally
