// The gradient compression ops of compress.h on a GPU, for workers whose gradients are
// there: same arguments, device pointers, queued on `stream`; the same bits and residuals
// as the CPU ops (tests/compress/cuda_compress_test.cc).
//
//   QuantizeOnGpu(gc, grad_dev, residual_dev, n, packed_dev, stream);
//   cudaMemcpyAsync(packed_host, packed_dev, PackedBytes(gc.type, n), cudaMemcpyDeviceToHost, stream);
//
// Only in a build with CUDA (TALLY_HAVE_CUDA). REQUIRES: config.enabled().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compress/compress.h"

namespace tally {

void QuantizeOnGpu(const CompressionConfig& config, const float* grad, float* residual, int64_t n, uint8_t* packed,
                   cudaStream_t stream);
void DequantizeOnGpu(const CompressionConfig& config, const uint8_t* packed, int64_t n, float* out,
                     cudaStream_t stream);

}  // namespace tally
