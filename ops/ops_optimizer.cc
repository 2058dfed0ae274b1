// The dispatch of the optimizer and mixed-precision ops of ops/ops.h (see ops/dispatch.h).
#include "ops/dispatch.h"

namespace tally {

bool AllFinite(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return true;
  for (const Tensor& t : tensors) dispatch::OnCuda("AllFinite", {&tensors[0], &t});
  TALLY_OP("AllFinite", TENSORS(&tensors[0]), AllFinite(tensors));
}
void NonFiniteFlag(const std::vector<Tensor>& tensors, Tensor* found) {
  for (const Tensor& t : tensors) dispatch::OnCuda("NonFiniteFlag", {found, &t});
  TALLY_OP("NonFiniteFlag", TENSORS(found), NonFiniteFlag(tensors, found));
}

void SgdUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight, Tensor* mom) {
  TALLY_OP("SgdUpdate", TENSORS(&grad, weight, mom), SgdUpdate(p, grad, weight, mom));
}
void SgdMultiPrecisionUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight,
                             Tensor* master, Tensor* mom) {
  TALLY_OP("SgdMultiPrecisionUpdate", TENSORS(&grad, weight, master, mom),
           SgdMultiPrecisionUpdate(p, grad, weight, master, mom));
}
void MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots) {
  MultiSgdUpdate(p, slots, SgdStepScalars{});
}
void MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots,
                    const SgdStepScalars& s) {
  if (slots.empty()) return;
  for (const SgdSlot& slot : slots) {
    dispatch::OnCuda("MultiSgdUpdate",
                     {&slots[0].weight, &slot.grad, &slot.weight, &slot.master, &slot.mom});
  }
  TALLY_OP("MultiSgdUpdate", TENSORS(&slots[0].weight, &s.lr, &s.grad_scale, &s.found),
           MultiSgdUpdate(p, slots, s));
}

}  // namespace tally
