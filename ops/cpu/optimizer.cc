// MXNet's SGD and NAG updates, in place over flat arrays. The per-element update is one
// inline function (ops/sgd_rule.h) shared by every entry point and by the CUDA kernels, so
// all apply the same arithmetic in the same order; the 16-bit weights are the master rounded
// to nearest even by the scalar converters of base/dtype.h.
#include <algorithm>

#include "ops/cpu/parallel.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "ops/scalar_tensor.h"
#include "ops/sgd_rule.h"

namespace tally {
namespace {

float* CheckedMomentum(const char* op, const SgdParams& p, Tensor* mom, int64_t n) {
  if (mom == nullptr) {
    CHECK(p.momentum == 0.0f) << op << ": momentum " << p.momentum << " needs a mom tensor";
    return nullptr;
  }
  CHECK(mom->dtype() == DType::kF32 && mom->numel() == n)
      << op << ": mom " << mom->ToString() << " must be float32 with " << n << " elements";
  return mom->data<float>();
}

float ToFloat(DType t, uint16_t v) {
  return t == DType::kF16 ? HalfToFloat(v) : BFloat16ToFloat(v);
}

uint16_t FromFloat(DType t, float v) {
  return t == DType::kF16 ? FloatToHalf(v) : FloatToBFloat16(v);
}

}  // namespace

void cpu::SgdUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight, Tensor* mom) {
  const char* op = "SgdUpdate";
  CHECK(weight->dtype() == DType::kF32 && grad.dtype() == DType::kF32 &&
        grad.numel() == weight->numel())
      << op << ": weight " << weight->ToString() << " and grad " << grad.ToString()
      << " must be float32 of equal size";
  const int64_t n = weight->numel();
  float* m = CheckedMomentum(op, p, mom, n);
  const float* g = grad.data<float>();
  float* w = weight->data<float>();
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(n))
  for (int64_t i = 0; i < n; ++i) SgdUpdateOne(p, g[i], w + i, m != nullptr ? m + i : nullptr);
}

void cpu::SgdMultiPrecisionUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight,
                             Tensor* master, Tensor* mom) {
  const char* op = "SgdMultiPrecisionUpdate";
  const DType t = weight->dtype();
  CHECK(t == DType::kF16 || t == DType::kBF16)
      << op << ": weight " << weight->ToString() << " must be float16 or bfloat16";
  // A float32 gradient is accepted too: it is what a worker holds before casting.
  CHECK(grad.dtype() == t || grad.dtype() == DType::kF32)
      << op << ": grad " << grad.ToString() << " must be " << DTypeName(t) << " or float32";
  CHECK(master->dtype() == DType::kF32)
      << op << ": master " << master->ToString() << " must be float32";
  const int64_t n = weight->numel();
  CHECK(grad.numel() == n && master->numel() == n)
      << op << ": weight " << weight->ToString() << ", grad " << grad.ToString()
      << " and master " << master->ToString() << " differ in size";
  float* m = CheckedMomentum(op, p, mom, n);
  float* ms = master->data<float>();
  uint16_t* w = weight->data<uint16_t>();
  const bool grad_f32 = grad.dtype() == DType::kF32;
  const float* g32 = grad_f32 ? grad.data<float>() : nullptr;
  const uint16_t* g16 = grad_f32 ? nullptr : grad.data<uint16_t>();
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(n))
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad_f32 ? g32[i] : ToFloat(t, g16[i]);
    SgdUpdateOne(p, g, ms + i, m != nullptr ? m + i : nullptr);
    w[i] = FromFloat(t, ms[i]);
  }
}

void cpu::MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots) {
  cpu::MultiSgdUpdate(p, slots, SgdStepScalars{});
}

void cpu::MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots,
                         const SgdStepScalars& scalars) {
  CheckSgdStepScalars("MultiSgdUpdate", scalars);
  if (scalars.found.defined() && scalars.found.data<int32_t>()[0] != 0) return;  // skipped
  const SgdParams step = WithStepScalars(
      p, scalars.lr.defined() ? scalars.lr.data<float>() : nullptr,
      scalars.grad_scale.defined() ? scalars.grad_scale.data<float>() : nullptr);
  for (size_t i = 0; i < slots.size(); ++i) {
    SgdSlot s = slots[i];
    SgdParams q = step;
    q.lr = step.lr * s.lr_mult;
    q.wd = step.wd * s.wd_mult;
    if (!s.mom.defined()) q.momentum = 0.0f;
    Tensor* mom = s.mom.defined() ? &s.mom : nullptr;
    if (s.master.defined()) {
      cpu::SgdMultiPrecisionUpdate(q, s.grad, &s.weight, &s.master, mom);
    } else {
      cpu::SgdUpdate(q, s.grad, &s.weight, mom);
    }
  }
}

}  // namespace tally
