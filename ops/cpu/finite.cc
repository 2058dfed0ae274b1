// AllFinite on the host: a scan that stops at the first non-finite value.
#include <cmath>

#include "ops/backends.h"
#include "ops/ops.h"

namespace tally {

bool cpu::AllFinite(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    const int64_t n = t.numel();
    switch (t.dtype()) {
      case DType::kF32: {
        const float* p = t.data<float>();
        for (int64_t i = 0; i < n; ++i) {
          if (!std::isfinite(p[i])) return false;
        }
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        // Exponent bits all ones is inf or NaN in both formats.
        const uint16_t mask = t.dtype() == DType::kF16 ? 0x7c00 : 0x7f80;
        const uint16_t* p = t.data<uint16_t>();
        for (int64_t i = 0; i < n; ++i) {
          if ((p[i] & mask) == mask) return false;
        }
        break;
      }
      default:
        LOG(FATAL) << "AllFinite: " << t.ToString() << " is not a float tensor";
    }
  }
  return true;
}

}  // namespace tally
