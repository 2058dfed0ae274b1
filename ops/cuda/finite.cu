// NonFiniteFlag on the GPU: the flag zeroed on the stream, then every tensor in one launch
// (the chunking of multi_tensor.cuh), each thread testing exponent bits, and any thread that
// finds inf or NaN writing 1 to the flag (every writer writes the same value, so the race is
// harmless). Nothing waits, so it can be captured in a CUDA graph. AllFinite is the same
// flag copied back to the host, which waits for it.
#include <algorithm>
#include <memory>
#include <vector>

#include "ops/backends.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/multi_tensor.cuh"
#include "ops/scalar_tensor.h"

namespace tally {
namespace cuda {
namespace {

constexpr int kMaxTensors = 512;
constexpr int kThreads = 256;

struct FiniteTable {
  const void* data[kMaxTensors];
  int64_t sizes[kMaxTensors];
  int64_t chunk_begin[kMaxTensors + 1];
  uint8_t kind[kMaxTensors];  // 0: fp32, 1: fp16, 2: bf16
  int count;
};
static_assert(sizeof(FiniteTable) <= 32764, "kernel parameters are limited to 32764 bytes");

__device__ inline bool NotFinite(const FiniteTable& t, int tensor, int64_t i) {
  if (t.kind[tensor] == 0) {
    const uint32_t bits = static_cast<const uint32_t*>(t.data[tensor])[i];
    return (bits & 0x7f800000u) == 0x7f800000u;
  }
  const uint16_t bits = static_cast<const uint16_t*>(t.data[tensor])[i];
  const uint16_t mask = t.kind[tensor] == 1 ? 0x7c00 : 0x7f80;
  return (bits & mask) == mask;
}

__global__ void __launch_bounds__(kThreads) FiniteKernel(const __grid_constant__ FiniteTable t,
                                                         int* found) {
  const int64_t chunks = t.chunk_begin[t.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const ChunkSpan span = MapChunk(t.chunk_begin, t.sizes, t.count, c);
    bool bad = false;
    for (int64_t i = span.begin + threadIdx.x; i < span.end; i += kThreads) {
      bad |= NotFinite(t, span.tensor, i);
    }
    if (bad) *found = 1;
  }
}

// Zeroes *found and queues the kernel over every tensor, in as many launches as the tables
// take; nothing waits.
void QueueFlag(const char* op, const std::vector<Tensor>& tensors, Tensor* found) {
  CHECK(found != nullptr) << op << ": found is required";
  CheckScalarTensor(op, "found", *found, DType::kI32, 1);
  const DeviceContext& ctx = Context(found->device());
  TALLY_CUDA_CHECK(cudaMemsetAsync(found->raw_data(), 0, sizeof(int32_t), ctx.stream));
  auto table = std::make_unique<FiniteTable>();
  size_t next = 0;
  while (next < tensors.size()) {
    table->count = 0;
    for (; next < tensors.size() && table->count < kMaxTensors; ++next) {
      const Tensor& x = tensors[next];
      const int k = table->count;
      switch (x.dtype()) {
        case DType::kF32: table->kind[k] = 0; break;
        case DType::kF16: table->kind[k] = 1; break;
        case DType::kBF16: table->kind[k] = 2; break;
        default: LOG(FATAL) << op << ": " << x.ToString() << " is not a float tensor";
      }
      table->data[k] = x.raw_data();
      table->sizes[k] = x.numel();
      ++table->count;
    }
    const int64_t chunks = FillChunkBegin(table->sizes, table->count, table->chunk_begin);
    if (chunks == 0) continue;
    const int grid = static_cast<int>(std::min<int64_t>(chunks, int64_t{ctx.sm_count} * 8));
    FiniteKernel<<<grid, kThreads, 0, ctx.stream>>>(*table, Ptr<int>(*found));
    TALLY_LAUNCH_CHECK();
  }
}

}  // namespace

void NonFiniteFlag(const std::vector<Tensor>& tensors, Tensor* found) {
  QueueFlag("NonFiniteFlag", tensors, found);
}

bool AllFinite(const std::vector<Tensor>& tensors) {
  Tensor found = Tensor::Empty({1}, DType::kI32, tensors[0].device());
  QueueFlag("AllFinite", tensors, &found);
  Tensor host = Tensor::Empty({1}, DType::kI32);
  host.CopyFrom(found);  // waits for the stream
  return host.data<int32_t>()[0] == 0;
}

}  // namespace cuda
}  // namespace tally
