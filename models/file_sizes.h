// Overflow-safe sizes for the readers of tensor files (NDArray .params, safetensors, and the
// checkpoints made of them). A shape read from a file is checked here, and its bytes compared
// with the bytes the file still holds, before anything of that size is allocated:
//
//   uint64_t bytes = 0;
//   if (!ShapeBytes(shape, DTypeSize(dtype), &bytes)) return Bad("the product of the dims wraps");
//   if (bytes > bytes_left_in_file) return Bad("truncated");
//   Tensor t = Tensor::Empty(shape, dtype);   // NumElements(shape) cannot wrap now
//
// Plain functions of their arguments: thread-safe.
#pragma once

#include <cstdint>
#include <limits>

#include "base/tensor.h"

namespace tally {

// The bytes of a tensor of `shape` whose elements take `element_size` bytes, in *bytes.
// False when a dimension is negative, or when the product of the dimensions, zeros counted
// as ones, times the element size passes INT64_MAX. Zeros count as ones because code that
// takes such a tensor computes strides and permuted shapes from the other dimensions (as
// NchwToNhwc does), and those products must not wrap either, even where no element exists.
inline bool ShapeBytes(const Shape& shape, uint64_t element_size, uint64_t* bytes) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t product = element_size;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(d), &product) || product > kMax) return false;
  }
  *bytes = empty ? 0 : product;
  return true;
}

}  // namespace tally
