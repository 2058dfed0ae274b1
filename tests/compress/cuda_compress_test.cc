// The gradient compression kernels (compress/cuda/quantize.cu) against the CPU ops: the same
// packed bits and residuals bit for bit over several pushes of arrays of ragged lengths, both
// types, two thresholds, and the same dequantised values. Skipped, saying so, without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "compress/compress.h"
#include "tests/compress/compress_fixture.h"  // SameBits
#include "tests/ops/cuda_compare.h"

#ifdef TALLY_HAVE_CUDA
#include <cuda_runtime.h>

#include "compress/cuda/quantize.h"
#endif

namespace tally {
namespace {

#ifdef TALLY_HAVE_CUDA
// One push through the kernels: grad and residual in, packed bits and the new residual
// out, and the bits dequantised on the GPU into *values.
void PushOnGpu(const CompressionConfig& gc, const std::vector<float>& grad, std::vector<float>* residual,
               std::vector<uint8_t>* packed, std::vector<float>* values) {
  const int64_t n = static_cast<int64_t>(grad.size());
  const int64_t bytes = PackedBytes(gc.type, n);
  float *g = nullptr, *r = nullptr, *v = nullptr;
  uint8_t* p = nullptr;
  ASSERT_EQ(cudaMalloc(&g, n * 4 + 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&r, n * 4 + 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&v, n * 4 + 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, bytes + 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(p, 0xAB, bytes), cudaSuccess);  // the kernel must write the padding
  ASSERT_EQ(cudaMemcpy(g, grad.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(r, residual->data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  QuantizeOnGpu(gc, g, r, n, p, nullptr);
  DequantizeOnGpu(gc, p, n, v, nullptr);
  packed->resize(bytes);
  values->resize(n);
  ASSERT_EQ(cudaMemcpy(packed->data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(residual->data(), r, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(values->data(), v, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(g);
  cudaFree(r);
  cudaFree(v);
  cudaFree(p);
}
#endif

// Generated gradients, not the fixtures' file: the GPU checks run this executable from a
// bundle without the source tree (tools/bundle.sh). The CPU ops it is held to are checked
// against the fixtures by compress_test.
TEST(CudaCompression, KernelsMatchTheCpuOps) {
  TALLY_REQUIRE_GPU();
#ifdef TALLY_HAVE_CUDA
  for (const char* type : {"2bit", "1bit"}) {
    for (float threshold : {0.5f, 0.125f}) {
      CompressionConfig gc;
      ASSERT_TRUE(ParseCompression(type, threshold, &gc).ok());
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{37}, int64_t{300}, int64_t{(1 << 20) + 13}}) {
        std::vector<float> rg(n, 0.0f), rc(n, 0.0f);
        // Several pushes: the residual each leaves is the next one's start.
        for (int step = 0; step < 3; ++step) {
          std::vector<float> grad(n);
          for (int64_t i = 0; i < n; ++i) {
            grad[i] = static_cast<float>(((i * 7919 + step * 104729) % 2001) - 1000) / 1500.0f;
          }
          std::vector<float> vg, vc(n);
          std::vector<uint8_t> pg, pc(PackedBytes(gc.type, n));
          PushOnGpu(gc, grad, &rg, &pg, &vg);
          Quantize(gc, grad.data(), rc.data(), n, pc.data());
          Dequantize(gc, pc.data(), n, vc.data());
          ASSERT_EQ(pg, pc) << type << " t " << threshold << " n " << n << " step " << step;
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(testing::SameBits(rg[i], rc[i])) << type << " n " << n << " step " << step << " value " << i;
          }
          ASSERT_EQ(vg, vc) << type << " n " << n << " step " << step;
        }
      }
    }
  }
#endif
}

}  // namespace
}  // namespace tally
