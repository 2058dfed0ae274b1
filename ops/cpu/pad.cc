// Zero-padding and cropping of the last (channel) dimension, for any dtype: a byte copy per
// row, since no value is converted.
#include <cstring>

#include "ops/backends.h"
#include "ops/ops.h"
#include "ops/pad_shape.h"

namespace tally {

void cpu::PadLastDim(const Tensor& x, Tensor* y) {
  const LastDimCopy c = CheckLastDimCopy("PadLastDim", x, *y);
  const size_t es = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  for (int64_t r = 0; r < c.rows; ++r) {
    std::memcpy(dst + r * c.wide * es, src + r * c.narrow * es, c.narrow * es);
    std::memset(dst + (r * c.wide + c.narrow) * es, 0, (c.wide - c.narrow) * es);
  }
}

void cpu::CropLastDim(const Tensor& x, Tensor* y) {
  const LastDimCopy c = CheckLastDimCopy("CropLastDim", *y, x);
  const size_t es = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  for (int64_t r = 0; r < c.rows; ++r) {
    std::memcpy(dst + r * c.narrow * es, src + r * c.wide * es, c.narrow * es);
  }
}

}  // namespace tally
