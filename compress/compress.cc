// The CPU gradient compression ops (compress.h).
#include "compress/compress.h"

#include <glog/logging.h>

#include <cmath>
#include <cstring>

namespace tally {
namespace {

// Below this many bytes the threads cost more than they save (a ResNet-50 bias, a BN).
constexpr int64_t kParallelBytes = 1 << 14;

// The values of one block: at most kBlock, a multiple of 8 so that blocks start on whole
// bytes. Each step below is a loop without branches over the block, which the compiler
// vectorises; the results are those of MXNet's per-value rule (r - 0 is r, -0 included).
constexpr int kBlock = 256;

// 2bit: values [0, count) of one block; codes 3 (+t), 2 (-t) or 0, four to a byte, the first
// in bits 7-6.
void QuantizeTwoBitBlock(const float* grad, float* residual, int count, float t, uint8_t* packed) {
  uint8_t codes[kBlock] = {};
  for (int j = 0; j < count; ++j) {
    const float r = residual[j] + grad[j];
    const bool pos = r >= t;
    const bool neg = !pos && r <= -t;
    residual[j] = r - (pos ? t : neg ? -t : 0.0f);
    codes[j] = static_cast<uint8_t>(pos ? 3 : neg ? 2 : 0);
  }
  for (int b = 0; b < (count + 3) / 4; ++b) {
    packed[b] = static_cast<uint8_t>(codes[4 * b] << 6 | codes[4 * b + 1] << 4 | codes[4 * b + 2] << 2 | codes[4 * b + 3]);
  }
}

// 1bit: bit 1 (+1) when r > t, else 0 (-1); eight to a byte, the first in bit 7.
void QuantizeOneBitBlock(const float* grad, float* residual, int count, float t, uint8_t* packed) {
  uint8_t bits[kBlock] = {};
  for (int j = 0; j < count; ++j) {
    const float r = residual[j] + grad[j];
    const bool up = r > t;
    residual[j] = up ? r - 1.0f : r + 1.0f;
    bits[j] = up ? 1 : 0;
  }
  for (int b = 0; b < (count + 7) / 8; ++b) {
    unsigned byte = 0;
    for (int k = 0; k < 8; ++k) byte |= static_cast<unsigned>(bits[8 * b + k]) << (7 - k);
    packed[b] = static_cast<uint8_t>(byte);
  }
}

int ValuesPerByte(CompressionType type) { return type == CompressionType::kTwoBit ? 4 : 8; }

}  // namespace

Tensor QuantizerInput(const CompressionConfig& config, const Tensor& grad, float loss_scale) {
  // Factors that cancel leave the values as they are (not rounded through the division).
  const bool scaled = config.scale / loss_scale != 1.0f;
  if (grad.dtype() == DType::kF32 && !scaled) return grad;
  Tensor g = grad.To(DType::kF32);
  if (scaled) {
    float* p = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) p[i] = p[i] / loss_scale * config.scale;
  }
  return g;
}

Status ParseCompression(const std::string& type, float threshold, CompressionConfig* out) {
  CompressionConfig c;
  c.threshold = threshold;
  if (type.empty() || type == "none") {
    c.type = CompressionType::kNone;
  } else if (type == "2bit") {
    c.type = CompressionType::kTwoBit;
    if (!(threshold > 0.0f) || !std::isfinite(threshold)) {
      return Status::InvalidArgument("gradient compression 2bit: the threshold must be a positive number, not " +
                                     std::to_string(threshold));
    }
  } else if (type == "1bit") {
    c.type = CompressionType::kOneBit;
    if (!std::isfinite(threshold)) {
      return Status::InvalidArgument("gradient compression 1bit: the threshold must be finite");
    }
  } else {
    return Status::InvalidArgument("gradient compression '" + type + "' is unknown (2bit, 1bit or none)");
  }
  *out = c;
  return Status::Ok();
}

const char* CompressionName(CompressionType type) {
  switch (type) {
    case CompressionType::kTwoBit: return "2bit";
    case CompressionType::kOneBit: return "1bit";
    default: return "none";
  }
}

int64_t PackedBytes(CompressionType type, int64_t n) {
  CHECK(type != CompressionType::kNone) << "PackedBytes without a compression";
  const int64_t per_word = 4 * ValuesPerByte(type);
  return 4 * ((n + per_word - 1) / per_word);
}

std::vector<PackedSlice> PackedLayout(CompressionType type, const std::vector<std::pair<int64_t, int64_t>>& slices) {
  std::vector<PackedSlice> layout;
  int64_t next = 0;
  for (const auto& [offset, length] : slices) {
    PackedSlice p;
    p.offset = offset;
    p.length = length;
    p.byte_offset = next;
    p.bytes = PackedBytes(type, length);
    next += p.bytes;
    layout.push_back(p);
  }
  return layout;
}

void Quantize(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed) {
  CHECK(config.enabled()) << "Quantize without a compression";
  const int per_byte = ValuesPerByte(config.type);
  const int64_t bytes = PackedBytes(config.type, n);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const float t = config.threshold;
  const bool two_bit = config.type == CompressionType::kTwoBit;
#pragma omp parallel for schedule(static) if (n > 4 * kParallelBytes)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t i = k * kBlock;
    const int count = static_cast<int>(n - i < kBlock ? n - i : kBlock);
    uint8_t* out = packed + i / per_byte;
    if (two_bit) {
      QuantizeTwoBitBlock(grad + i, residual + i, count, t, out);
    } else {
      QuantizeOneBitBlock(grad + i, residual + i, count, t, out);
    }
  }
  const int64_t used = (n + per_byte - 1) / per_byte;
  if (bytes > used) std::memset(packed + used, 0, static_cast<size_t>(bytes - used));
}

void Dequantize(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* out) {
  CHECK(config.enabled()) << "Dequantize without a compression";
  const float t = config.threshold;
  if (config.type == CompressionType::kTwoBit) {
    // A code's value: 00 and 01 are 0, 10 is -t, 11 is +t.
    const float values[4] = {0.0f, 0.0f, -t, t};
#pragma omp parallel for schedule(static) if (n > 4 * kParallelBytes)
    for (int64_t i = 0; i < n; ++i) out[i] = values[(packed[i >> 2] >> (6 - 2 * (i & 3))) & 3];
  } else {
#pragma omp parallel for schedule(static) if (n > 8 * kParallelBytes)
    for (int64_t i = 0; i < n; ++i) out[i] = ((packed[i >> 3] >> (7 - (i & 7))) & 1) ? 1.0f : -1.0f;
  }
}

}  // namespace tally
