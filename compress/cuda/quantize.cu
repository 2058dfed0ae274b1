// The gradient compression kernels (cuda/quantize.h): one thread per packed byte, so that
// no two threads write one byte and no atomics are needed.
#include "compress/cuda/quantize.h"

#include "ops/cuda/check.h"

namespace tally {
namespace {

constexpr int kThreads = 256;

// Byte b: values 4b..4b+3 (2bit) or 8b..8b+7 (1bit), the first in the high bits; the bytes
// past the values (padding to a whole word) are zero.
__global__ void QuantizeKernel(bool two_bit, float t, const float* grad, float* residual, int64_t n, int64_t bytes,
                               uint8_t* packed) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= bytes) return;
  const int per_byte = two_bit ? 4 : 8;
  const int64_t first = b * per_byte;
  unsigned byte = 0;
  for (int j = 0; j < per_byte && first + j < n; ++j) {
    const int64_t i = first + j;
    // Written as two roundings, like the CPU op: no fused multiply-add can change them.
    float r = __fadd_rn(residual[i], grad[i]);
    if (two_bit) {
      if (r >= t) {
        byte |= 3u << (6 - 2 * j);
        r = __fsub_rn(r, t);
      } else if (r <= -t) {
        byte |= 2u << (6 - 2 * j);
        r = __fadd_rn(r, t);
      }
    } else if (r > t) {
      byte |= 0x80u >> j;
      r = __fsub_rn(r, 1.0f);
    } else {
      r = __fadd_rn(r, 1.0f);
    }
    residual[i] = r;
  }
  packed[b] = static_cast<uint8_t>(byte);
}

__global__ void DequantizeKernel(bool two_bit, float t, const uint8_t* packed, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (two_bit) {
    const unsigned code = (packed[i >> 2] >> (6 - 2 * (i & 3))) & 3u;
    out[i] = code == 3u ? t : code == 2u ? -t : 0.0f;
  } else {
    out[i] = ((packed[i >> 3] >> (7 - (i & 7))) & 1u) ? 1.0f : -1.0f;
  }
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void QuantizeOnGpu(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed,
                   cudaStream_t stream) {
  const int64_t bytes = PackedBytes(config.type, n);
  if (bytes == 0) return;
  QuantizeKernel<<<Blocks(bytes), kThreads, 0, stream>>>(config.type == CompressionType::kTwoBit, config.threshold,
                                                        grad, residual, n, bytes, packed);
  TALLY_LAUNCH_CHECK();
}

void DequantizeOnGpu(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* out,
                     cudaStream_t stream) {
  if (n == 0) return;
  DequantizeKernel<<<Blocks(n), kThreads, 0, stream>>>(config.type == CompressionType::kTwoBit, config.threshold,
                                                      packed, n, out);
  TALLY_LAUNCH_CHECK();
}

}  // namespace tally
