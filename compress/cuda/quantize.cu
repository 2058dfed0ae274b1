// The gradient compression kernels (cuda/quantize.h): one thread per packed byte, so that
// no two threads write one byte and no atomics are needed.
#include "compress/cuda/quantize.h"

#include <glog/logging.h>

#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/ops.h"

namespace tally {
namespace {

constexpr int kThreads = 256;

// What is quantised for one value: the gradient in fp32, divided by the loss scale and
// multiplied by the compression's scale when those do not cancel (QuantizerInput).
struct Input {
  bool scaled = false;
  float loss_scale = 1.0f;
  float scale = 1.0f;
};

// Byte b: values 4b..4b+3 (2bit) or 8b..8b+7 (1bit), the first in the high bits; the bytes
// past the values (padding to a whole word) are zero. Nothing is written when *skip is
// nonzero (a slice that is not finite keeps its residual).
template <typename T>
__global__ void QuantizeKernel(bool two_bit, float t, const T* grad, Input in, const int* skip, float* residual,
                               int64_t n, int64_t bytes, uint8_t* packed) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= bytes || (skip != nullptr && *skip != 0)) return;
  const int per_byte = two_bit ? 4 : 8;
  const int64_t first = b * per_byte;
  unsigned byte = 0;
  for (int j = 0; j < per_byte && first + j < n; ++j) {
    const int64_t i = first + j;
    float g = cuda::Load(grad[i]);
    if (in.scaled) g = __fmul_rn(__fdiv_rn(g, in.loss_scale), in.scale);
    // Written as two roundings, like the CPU op: no fused multiply-add can change them.
    float r = __fadd_rn(residual[i], g);
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

__global__ void DequantizeAddKernel(bool two_bit, float t, const uint8_t* packed, int64_t n, float* sum, bool first,
                                    float divide_by) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v;
  if (two_bit) {
    const unsigned code = (packed[i >> 2] >> (6 - 2 * (i & 3))) & 3u;
    v = code == 3u ? t : code == 2u ? -t : 0.0f;
  } else {
    v = ((packed[i >> 3] >> (7 - (i & 7))) & 1u) ? 1.0f : -1.0f;
  }
  float s = __fadd_rn(first ? 0.0f : sum[i], v);
  if (divide_by != 1.0f) s = __fdiv_rn(s, divide_by);
  sum[i] = s;
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void QuantizeOnGpu(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed,
                   cudaStream_t stream) {
  const int64_t bytes = PackedBytes(config.type, n);
  if (bytes == 0) return;
  QuantizeKernel<float><<<Blocks(bytes), kThreads, 0, stream>>>(config.type == CompressionType::kTwoBit,
                                                               config.threshold, grad, Input(), nullptr,
                                                               residual, n, bytes, packed);
  TALLY_LAUNCH_CHECK();
}

void DequantizeOnGpu(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* out,
                     cudaStream_t stream) {
  if (n == 0) return;
  DequantizeKernel<<<Blocks(n), kThreads, 0, stream>>>(config.type == CompressionType::kTwoBit, config.threshold,
                                                      packed, n, out);
  TALLY_LAUNCH_CHECK();
}

void DequantizeAddOnGpu(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* sum, bool first,
                        float divide_by, cudaStream_t stream) {
  if (n == 0) return;
  DequantizeAddKernel<<<Blocks(n), kThreads, 0, stream>>>(config.type == CompressionType::kTwoBit, config.threshold,
                                                         packed, n, sum, first, divide_by);
  TALLY_LAUNCH_CHECK();
}

void QuantizeSlicesOnGpu(const CompressionConfig& config, const Tensor& grad, float loss_scale,
                         const std::vector<PackedSlice>& layout, Tensor* residual, Tensor* packed,
                         Tensor* nonfinite) {
  CHECK(config.enabled()) << "QuantizeSlicesOnGpu without a compression";
  const Device dev = grad.device();
  const int64_t total = layout.empty() ? 0 : layout.back().byte_offset + layout.back().bytes;
  CHECK(!dev.is_cpu() && residual->device() == dev && packed->device() == dev && nonfinite->device() == dev)
      << "QuantizeSlicesOnGpu: every tensor on one GPU";
  CHECK(residual->dtype() == DType::kF32 && residual->numel() == grad.numel() && packed->dtype() == DType::kU8 &&
        packed->numel() == total && nonfinite->dtype() == DType::kI32 &&
        nonfinite->numel() == static_cast<int64_t>(layout.size()))
      << "QuantizeSlicesOnGpu: residual " << residual->ToString() << ", packed " << packed->ToString()
      << ", nonfinite " << nonfinite->ToString() << " for " << grad.ToString() << " in " << layout.size()
      << " slices";
  const cuda::DeviceContext& ctx = cuda::Context(dev);
  Input in;
  in.scaled = config.scale / loss_scale != 1.0f;
  in.loss_scale = loss_scale;
  in.scale = config.scale;
  const bool two_bit = config.type == CompressionType::kTwoBit;
  for (size_t s = 0; s < layout.size(); ++s) {
    const PackedSlice& p = layout[s];
    CHECK(p.offset >= 0 && p.offset + p.length <= grad.numel()) << "QuantizeSlicesOnGpu: slice " << s;
    Tensor flag = nonfinite->Slice(static_cast<int64_t>(s), static_cast<int64_t>(s) + 1);
    NonFiniteFlag({grad.Slice(p.offset, p.offset + p.length)}, &flag);
    if (p.bytes == 0) continue;
    float* r = residual->data<float>() + p.offset;
    uint8_t* out = packed->data<uint8_t>() + p.byte_offset;
    TALLY_DISPATCH_FLOAT(grad.dtype(), "QuantizeSlicesOnGpu", T, {
      QuantizeKernel<T><<<Blocks(p.bytes), kThreads, 0, ctx.stream>>>(
          two_bit, config.threshold, cuda::Ptr<T>(grad) + p.offset, in, cuda::Ptr<int>(flag), r, p.length, p.bytes,
          out);
    });
    TALLY_LAUNCH_CHECK();
  }
}

}  // namespace tally
