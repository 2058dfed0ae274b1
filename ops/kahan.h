// A compensated (Kahan) sum held in two floats, for totals kept on the device across many
// steps (SoftmaxCrossEntropyAccumulate's loss_sum): a plain fp32 running sum loses the low
// digits of every addend once the total is large (at 1e5 an fp32 ulp is 0.008, as large as
// a batch's loss may be), and a double would need a second dtype on the device. Shared by
// the CPU op and the CUDA kernel, so that both add the same bits the same way.
#pragma once

#include "ops/host_device.h"

namespace tally {

// Adds `value` to the total sum + compensation: `compensation` holds what rounding `sum` to
// fp32 has left out, so that sum + compensation is the total to about twice fp32's
// precision. The addition is done in double: value, a batch's loss, comes as a double, and
// t - sum is exact there. No multiplications, so no contraction into FMAs can change it.
TALLY_HOST_DEVICE inline void KahanAdd(double value, float* sum, float* compensation) {
  const double y = value + static_cast<double>(*compensation);
  const float t = static_cast<float>(static_cast<double>(*sum) + y);
  *compensation = static_cast<float>(y - (static_cast<double>(t) - static_cast<double>(*sum)));
  *sum = t;
}

}  // namespace tally
