// The gradient compression kernels (compress/cuda/quantize.cu) against the CPU ops: the same
// packed bits and residuals bit for bit over the fixtures' pushes and over a large array of
// ragged length, and the same dequantised values. Skipped, saying so, without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "compress/compress.h"
#include "tests/compress/compress_fixture.h"
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

TEST(CudaCompression, KernelsMatchTheCpuOps) {
  TALLY_REQUIRE_GPU();
#ifdef TALLY_HAVE_CUDA
  for (const testing::CompressionCase& c : testing::LoadCompressionFixtures()) {
    for (size_t w = 0; w < c.pushes[0].grads.size(); ++w) {
      std::vector<float> rg(c.n, 0.0f), rc(c.n, 0.0f);
      for (size_t step = 0; step < c.pushes.size(); ++step) {
        const std::vector<float>& grad = c.pushes[step].grads[w];
        std::vector<uint8_t> pg, pc(PackedBytes(c.config.type, c.n));
        std::vector<float> vg, vc(c.n);
        PushOnGpu(c.config, grad, &rg, &pg, &vg);
        Quantize(c.config, grad.data(), rc.data(), c.n, pc.data());
        Dequantize(c.config, pc.data(), c.n, vc.data());
        ASSERT_EQ(pg, pc) << c.name << " step " << step;
        ASSERT_EQ(pg, c.pushes[step].packed[w]) << c.name << " step " << step;
        for (int64_t i = 0; i < c.n; ++i) ASSERT_TRUE(testing::SameBits(rg[i], rc[i])) << c.name << " " << i;
        ASSERT_EQ(vg, vc) << c.name << " step " << step;
      }
    }
  }
  // A ragged length over many blocks, both types.
  for (const char* type : {"2bit", "1bit"}) {
    CompressionConfig gc;
    ASSERT_TRUE(ParseCompression(type, 0.3f, &gc).ok());
    const int64_t n = (1 << 20) + 13;
    std::vector<float> grad(n);
    for (int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>((i * 7919) % 2001 - 1000) / 1500.0f;
    std::vector<float> rg(n, 0.05f), rc(n, 0.05f), vg, vc(n);
    std::vector<uint8_t> pg, pc(PackedBytes(gc.type, n));
    PushOnGpu(gc, grad, &rg, &pg, &vg);
    Quantize(gc, grad.data(), rc.data(), n, pc.data());
    Dequantize(gc, pc.data(), n, vc.data());
    EXPECT_EQ(pg, pc) << type;
    EXPECT_EQ(rg, rc) << type;
    EXPECT_EQ(vg, vc) << type;
  }
#endif
}

}  // namespace
}  // namespace tally
