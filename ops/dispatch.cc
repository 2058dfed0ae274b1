#include "ops/dispatch.h"

namespace tally {
namespace dispatch {

bool OnCuda(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else {
      CHECK(t->device() == first->device())
          << op << ": tensors on different devices: " << first->ToString() << " and "
          << t->ToString();
    }
  }
  return first != nullptr && !first->device().is_cpu();
}

}  // namespace dispatch
}  // namespace tally
