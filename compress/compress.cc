// The CPU gradient compression ops (compress.h).
#include "compress/compress.h"

#include <glog/logging.h>

#include <cmath>
#include <cstring>

namespace tally {
namespace {

// Below this many bytes the threads cost more than they save (a ResNet-50 bias, a BN).
constexpr int64_t kParallelBytes = 1 << 14;

// Byte b of 2bit: values 4b..4b+3, the first in bits 7-6.
inline uint8_t QuantizeTwoBitByte(const float* grad, float* residual, int count, float pos, float neg) {
  uint8_t byte = 0;
  for (int j = 0; j < count; ++j) {
    float r = residual[j] + grad[j];
    const int shift = 6 - 2 * j;
    if (r >= pos) {
      byte |= static_cast<uint8_t>(3u << shift);
      r -= pos;
    } else if (r <= neg) {
      byte |= static_cast<uint8_t>(2u << shift);
      r -= neg;
    }
    residual[j] = r;
  }
  return byte;
}

// Byte b of 1bit: values 8b..8b+7, the first in bit 7.
inline uint8_t QuantizeOneBitByte(const float* grad, float* residual, int count, float threshold) {
  uint8_t byte = 0;
  for (int j = 0; j < count; ++j) {
    float r = residual[j] + grad[j];
    if (r > threshold) {
      byte |= static_cast<uint8_t>(0x80u >> j);
      r -= 1.0f;
    } else {
      r += 1.0f;
    }
    residual[j] = r;
  }
  return byte;
}

int ValuesPerByte(CompressionType type) { return type == CompressionType::kTwoBit ? 4 : 8; }

}  // namespace

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

void Quantize(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed) {
  CHECK(config.enabled()) << "Quantize without a compression";
  const int per_byte = ValuesPerByte(config.type);
  const int64_t bytes = PackedBytes(config.type, n);
  const int64_t used = (n + per_byte - 1) / per_byte;
  const float t = config.threshold;
  const bool two_bit = config.type == CompressionType::kTwoBit;
#pragma omp parallel for schedule(static) if (used > kParallelBytes)
  for (int64_t b = 0; b < used; ++b) {
    const int64_t i = b * per_byte;
    const int count = static_cast<int>(n - i < per_byte ? n - i : per_byte);
    packed[b] = two_bit ? QuantizeTwoBitByte(grad + i, residual + i, count, t, -t)
                        : QuantizeOneBitByte(grad + i, residual + i, count, t);
  }
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
