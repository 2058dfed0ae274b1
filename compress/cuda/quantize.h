// The gradient compression ops of compress.h on a GPU, for workers whose gradients are
// there: same arguments, device pointers, queued on `stream`; the same bits and residuals
// as the CPU ops (tests/compress/cuda_compress_test.cc).
//
//   QuantizeOnGpu(gc, grad_dev, residual_dev, n, packed_dev, stream);
//   cudaMemcpyAsync(packed_host, packed_dev, PackedBytes(gc.type, n), cudaMemcpyDeviceToHost, stream);
//
// A GPU worker's push of one key (gpu_dist_kvstore.h), every slice at once:
//
//   QuantizeSlicesOnGpu(gc, sum, loss_scale, PackedLayout(gc.type, slices), &residual, &packed, &nonfinite);
//
// Only in a build with CUDA (TALLY_HAVE_CUDA). REQUIRES: config.enabled().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "base/tensor.h"
#include "compress/compress.h"

namespace tally {

void QuantizeOnGpu(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed,
                   cudaStream_t stream);
void DequantizeOnGpu(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* out,
                     cudaStream_t stream);

// sum[i] = (first ? 0 : sum[i]) + the value of packed's bits i, in fp32, then divided by
// divide_by when it is not 1: one device's turn of the device store's compressed sum
// (kvstore/compressed_reduce.h), the same roundings in the same order.
void DequantizeAddOnGpu(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* sum, bool first,
                        float divide_by, cudaStream_t stream);

// What the dist store does on the CPU for each slice of a pushed gradient, on grad's device
// and queued on its stream, nothing waited for: nonfinite[s] (int32) = 1 when slice s of
// grad holds an inf or NaN, and then its residual and its bytes of packed are left as they
// were (the slice goes uncompressed, and the server skips the step); else 0, and
// QuantizerInput(config, slice, loss_scale) (fp32, the same two roundings) is quantised
// with residual[offset ..] into packed[byte_offset ..]. grad: 1-D, f32, f16 or bf16;
// residual: f32 of grad's size; packed: u8 of the layout's size; nonfinite: i32 of one per
// slice; all on one GPU.
void QuantizeSlicesOnGpu(const CompressionConfig& config, const Tensor& grad, float loss_scale,
                         const std::vector<PackedSlice>& layout, Tensor* residual, Tensor* packed,
                         Tensor* nonfinite);

}  // namespace tally
