// GpuCompressedReduce (gpu_compressed_reduce.h).
#include "kvstore/gpu_compressed_reduce.h"

#include <glog/logging.h>

#include "compress/cuda/quantize.h"
#include "ops/cuda/context.h"
#include "ops/ops.h"

namespace tally {
namespace {

// Per key, whether its gradient is finite on every device: one flag per key and device,
// queued on each device, then one wait per device for its flags.
std::vector<bool> FiniteOnEveryDevice(const std::vector<Device>& devices,
                                      const std::vector<std::vector<Tensor>>& grads) {
  const int64_t keys = static_cast<int64_t>(grads.size());
  std::vector<bool> finite(grads.size(), true);
  for (size_t d = 0; d < devices.size(); ++d) {
    Tensor flags = Tensor::Empty({keys}, DType::kI32, devices[d]);
    for (int64_t i = 0; i < keys; ++i) {
      Tensor flag = flags.Slice(i, i + 1);
      NonFiniteFlag({grads[i][d]}, &flag);
    }
    Tensor host = Tensor::Empty({keys}, DType::kI32);
    host.CopyFrom(flags);  // waits for the device
    for (int64_t i = 0; i < keys; ++i) {
      if (host.data<int32_t>()[i] != 0) finite[i] = false;
    }
  }
  return finite;
}

void MakeBuffers(const CompressionConfig& gc, const std::vector<Device>& devices, int64_t n, GpuCompressedKey* k) {
  if (!k->residuals.empty()) return;
  const int64_t bytes = PackedBytes(gc.type, n);
  for (size_t d = 0; d < devices.size(); ++d) {
    k->residuals.push_back(Tensor::Zeros({n}, DType::kF32, devices[d]));
    k->packed.push_back(Tensor::Empty({bytes}, DType::kU8, devices[d]));
    k->gathered.push_back(d == 0 ? k->packed[0] : Tensor::Empty({bytes}, DType::kU8, devices[0]));
    k->sums.push_back(Tensor::Empty({n}, DType::kF32, devices[d]));
  }
}

}  // namespace

void GpuCompressedReduce(const CompressionConfig& gc, const std::vector<Device>& devices,
                         const std::vector<std::vector<Tensor>>& grads, const std::vector<GpuCompressedKey*>& states,
                         std::vector<bool>* done) {
  CHECK(gc.enabled() && states.size() == grads.size());
  *done = FiniteOnEveryDevice(devices, grads);
  const cudaStream_t first_stream = cuda::Context(devices[0]).stream;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!(*done)[i]) continue;
    const int64_t n = grads[i][0].numel();
    GpuCompressedKey* k = states[i];
    MakeBuffers(gc, devices, n, k);
    const std::vector<PackedSlice> whole = PackedLayout(gc.type, {{0, n}});
    for (size_t d = 0; d < devices.size(); ++d) {
      // The loss scale is not divided out here, as on the host (CompressedReduce): the
      // update divides the sum by it.
      Tensor flag = Tensor::Empty({1}, DType::kI32, devices[d]);
      QuantizeSlicesOnGpu(gc, grads[i][d].Reshape({n}), 1.0f, whole, &k->residuals[d], &k->packed[d], &flag);
      if (d > 0) k->gathered[d].CopyFrom(k->packed[d]);  // to the first GPU, after the kernel
      const bool last = d + 1 == devices.size();
      DequantizeAddOnGpu(gc, k->gathered[d].data<uint8_t>(), n, k->sums[0].data<float>(), d == 0,
                         last ? gc.scale : 1.0f, first_stream);
    }
    for (size_t d = 1; d < devices.size(); ++d) k->sums[d].CopyFrom(k->sums[0]);
  }
}

}  // namespace tally
