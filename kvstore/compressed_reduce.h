// The devices' sum of the `device` kvstore under gradient compression, as MXNet's CommDevice
// makes it: each device's gradient is quantised with that device's residual for the key,
// dequantised, and the results summed in device order (compress/compress.h). Internal to
// kvstore/.
//
//   std::vector<Tensor> residuals;  // per key, kept across pushes: one per device
//   Tensor sum = CompressedReduce(gc, grads, &residuals);
//   if (!sum.defined()) sum = comm->Reduce(key, grads);  // a gradient is not finite
#pragma once

#include <vector>

#include "base/tensor.h"
#include "compress/compress.h"

namespace tally {

// The fp32 sum over vals (host tensors of equal size, any wire dtype) of each one's
// dequantised bits (each value times gc.scale quantised, the sum divided by it again); *residuals (made on the first call, fp32 zeros) keep what was not sent.
// Returns an undefined tensor, residuals untouched, when some value is not finite: the
// caller sums uncompressed so that the step is skipped as without compression.
// REQUIRES: gc.enabled().
Tensor CompressedReduce(const CompressionConfig& gc, const std::vector<Tensor>& vals, std::vector<Tensor>* residuals);

}  // namespace tally
