// Gradient compression with error feedback, as MXNet 1.9's kvstore does it
// (kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})): a worker adds each
// gradient to the key's residual, sends a few bits per value, and keeps in the residual
// what the bits did not carry; the server turns the bits back into floats and sums them.
//
//   CompressionConfig gc;
//   TALLY_RETURN_IF_ERROR(ParseCompression("2bit", 0.5f, &gc));
//   std::vector<float> residual(n, 0.0f);                 // one per key, kept across steps
//   std::vector<uint8_t> packed(PackedBytes(gc.type, n));
//   Quantize(gc, grad, residual.data(), n, packed.data());   // worker, every push
//   Dequantize(gc, packed.data(), n, out);                    // server
//
// The rules (per value i, r the residual, t the threshold; fp32 arithmetic):
//   2bit  r += g; r >= t: send +t, r -= t; else r <= -t: send -t, r += t; else send 0.
//   1bit  r += g; r > t: send +1, r -= 1; else send -1, r += 1 (t only picks the sign).
// Packing (docs/wire.md, "Compressed pushes"): byte b holds values 4b..4b+3 (2bit) or
// 8b..8b+7 (1bit), the first in the most significant bits; 2bit codes 11 = +t, 10 = -t,
// 00 = 0 (01 reads as 0); 1bit 1 = +1, 0 = -1. The bytes are padded with zeros to a whole
// number of 4-byte words (MXNet packs into floats): 16 values per word (2bit), 32 (1bit).
//
// GPU workers: compress/cuda/quantize.h has the same two ops as kernels, bit for bit.
// Thread-safety: the functions keep no state; Quantize writes residual, the caller owns it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

enum class CompressionType : uint8_t { kNone = 0, kTwoBit = 1, kOneBit = 2 };

struct CompressionConfig {
  CompressionType type = CompressionType::kNone;
  float threshold = 0.5f;  // MXNet's default
  // The stores quantise gradient * scale and divide the sum of the dequantised values by it
  // again (the servers, through Meta.grad_scale): `tally train` pushes batch means, MXNet's
  // thresholds are for batch sums. 1 for tally.kv, whose users push what MXNet's would.
  float scale = 1.0f;
  bool enabled() const { return type != CompressionType::kNone; }
};

// "2bit", "1bit" or "none" (also ""), as --gradient-compression and MXNet's 'type' spell
// them. 2bit needs a positive finite threshold (MXNet's own check); 1bit a finite one.
Status ParseCompression(const std::string& type, float threshold, CompressionConfig* out);
const char* CompressionName(CompressionType type);  // "none", "2bit", "1bit"

// Bytes of n packed values: 4 * ceil(n / 16) for 2bit, 4 * ceil(n / 32) for 1bit.
// REQUIRES: type is not kNone.
int64_t PackedBytes(CompressionType type, int64_t n);

// What is quantised for a gradient: grad / loss_scale * config.scale in fp32 (the
// threshold's units, CompressionConfig::scale), a new tensor; grad itself when it is fp32
// and the factors cancel. REQUIRES: grad on the CPU, f32, f16 or bf16.
Tensor QuantizerInput(const CompressionConfig& config, const Tensor& grad, float loss_scale = 1.0f);

// residual[i] += grad[i], then the rule above; packed receives PackedBytes(type, n) bytes.
// grad and residual may not overlap packed. REQUIRES: config.enabled().
void Quantize(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed);
// out[i] = the value that packed's bits stand for, i < n. REQUIRES: config.enabled().
void Dequantize(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* out);

// A key pushed as slices (one per server) is quantised slice by slice, each from its own
// first value. A GPU worker packs all of a key's slices into one buffer, one after another,
// so that a single copy brings them to the host: slice s's bits lie at byte_offset.
struct PackedSlice {
  int64_t offset = 0;       // the slice's first value in the key
  int64_t length = 0;       // its values
  int64_t byte_offset = 0;  // its bits' first byte in the buffer (a multiple of 4)
  int64_t bytes = 0;        // PackedBytes(type, length)
};
// The layout of slices given as (offset, length) pairs, in that order; the buffer's size is
// the last slice's byte_offset + bytes (0 for none). REQUIRES: type is not kNone.
std::vector<PackedSlice> PackedLayout(CompressionType type, const std::vector<std::pair<int64_t, int64_t>>& slices);

}  // namespace tally
