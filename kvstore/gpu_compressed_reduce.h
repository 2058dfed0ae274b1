// The `device` kvstore's sum under gradient compression when its devices are GPUs
// (gpu_kvstore.h), as CompressedReduce (compressed_reduce.h) makes it on the host and as
// MXNet's CommDevice does: each GPU quantises its own gradient of a key with its own
// residual, the packed words go to the first GPU, which dequantises and sums them in
// device order in fp32 (divided by the compression's scale), and the sum is copied to every
// GPU. A key whose gradient is not finite on some GPU is left out, every residual of it
// untouched: the caller sums it uncompressed, and the step is skipped as without
// compression. Internal to kvstore/; compiled only with CUDA.
//
//   std::vector<GpuCompressedKey*> states = {&entry0.compressed, &entry1.compressed};
//   std::vector<bool> done;
//   GpuCompressedReduce(gc, devices, {{g0_dev0, g0_dev1}, {g1_dev0, g1_dev1}}, states, &done);
//   if (done[0]) use states[0]->sums[d] on device d, else sum key 0 with NCCL.
#pragma once

#include <vector>

#include "base/tensor.h"
#include "compress/compress.h"

namespace tally {

// One key's buffers, made at its first compressed sum and kept for later ones.
struct GpuCompressedKey {
  std::vector<Tensor> residuals;  // fp32 on each GPU: what that GPU's bits did not carry yet
  std::vector<Tensor> packed;     // u8 on each GPU: its bits of the step
  std::vector<Tensor> gathered;   // u8 on the first GPU: the other GPUs' bits, copied there
  std::vector<Tensor> sums;       // fp32 on each GPU: the step's sum
};

// grads[i][d]: key i's gradient on devices[d] (f32, f16 or bf16, one size per key). Waits
// for every GPU once (the finite check). done[i]: whether key i was summed.
// REQUIRES: gc.enabled(); one state per key.
void GpuCompressedReduce(const CompressionConfig& gc, const std::vector<Device>& devices,
                         const std::vector<std::vector<Tensor>>& grads, const std::vector<GpuCompressedKey*>& states,
                         std::vector<bool>* done);

}  // namespace tally
