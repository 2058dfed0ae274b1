// The device dispatch shared by ops/ops.cc and ops/ops_optimizer.cc: checks that an op's
// tensors share one device and calls that device's backend (ops/backends.h). A build
// without CUDA has no cuda branch at all, so no CUDA symbol.
#pragma once

#include <initializer_list>

#include "ops/backends.h"
#include "ops/ops.h"

namespace tally {
namespace dispatch {

// Whether the op's tensors (nullptr entries are optional tensors left out) are on a CUDA
// device. A CHECK failure names the op and the two tensors that disagree.
bool OnCuda(const char* op, std::initializer_list<const Tensor*> tensors);

}  // namespace dispatch
}  // namespace tally

#ifdef TALLY_HAVE_CUDA
#define TALLY_OP(op, tensors, call)                   \
  do {                                                \
    if (::tally::dispatch::OnCuda(op, tensors)) {     \
      return cuda::call;                              \
    }                                                 \
    return cpu::call;                                 \
  } while (0)
#else
#define TALLY_OP(op, tensors, call)             \
  do {                                          \
    ::tally::dispatch::OnCuda(op, tensors);     \
    return cpu::call;                           \
  } while (0)
#endif
#define TENSORS(...) (std::initializer_list<const Tensor*>{__VA_ARGS__})
