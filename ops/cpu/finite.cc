// NonFiniteFlag and AllFinite on the host: a scan that stops at the first non-finite value.
// AllFinite is the flag read back, as on the GPU.
#include <cmath>

#include "ops/backends.h"
#include "ops/ops.h"
#include "ops/scalar_tensor.h"

namespace tally {
namespace {

bool AnyNonFinite(const char* op, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    const int64_t n = t.numel();
    switch (t.dtype()) {
      case DType::kF32: {
        const float* p = t.data<float>();
        for (int64_t i = 0; i < n; ++i) {
          if (!std::isfinite(p[i])) return true;
        }
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        // Exponent bits all ones is inf or NaN in both formats.
        const uint16_t mask = t.dtype() == DType::kF16 ? 0x7c00 : 0x7f80;
        const uint16_t* p = t.data<uint16_t>();
        for (int64_t i = 0; i < n; ++i) {
          if ((p[i] & mask) == mask) return true;
        }
        break;
      }
      default:
        LOG(FATAL) << op << ": " << t.ToString() << " is not a float tensor";
    }
  }
  return false;
}

void WriteFlag(const char* op, const std::vector<Tensor>& tensors, Tensor* found) {
  CHECK(found != nullptr) << op << ": found is required";
  CheckScalarTensor(op, "found", *found, DType::kI32, 1);
  found->data<int32_t>()[0] = AnyNonFinite(op, tensors) ? 1 : 0;
}

}  // namespace

void cpu::NonFiniteFlag(const std::vector<Tensor>& tensors, Tensor* found) {
  WriteFlag("NonFiniteFlag", tensors, found);
}

bool cpu::AllFinite(const std::vector<Tensor>& tensors) {
  Tensor found = Tensor::Empty({1}, DType::kI32);
  WriteFlag("AllFinite", tensors, &found);
  return found.data<int32_t>()[0] == 0;
}

}  // namespace tally
