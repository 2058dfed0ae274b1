// Element types of Tally tensors, and conversion between fp32 and the 16-bit floats.
//
//   std::vector<uint16_t> h(n);
//   FloatToHalf(x.data(), h.data(), n);      // round to nearest even, vectorised (F16C)
//   HalfToFloat(h.data(), x.data(), n);
//
// The bulk converters pick an AVX2/F16C path at run time when the CPU has it and fall
// back to portable code otherwise; both give bit-identical results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace tally {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kU8 = 4 };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "float32", "float16", "bfloat16", "int32", "uint8"
// Accepts MXNet's names ("float32", "float16", "bfloat16", "int32", "uint8") and the
// short ones ("f32", "f16", "bf16", "i32", "u8").
Status ParseDType(const std::string& name, DType* out);

// Scalar conversions, round to nearest even; NaN stays NaN, overflow becomes inf.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
inline float BFloat16ToFloat(uint16_t b) {
  union { uint32_t u; float f; } v{static_cast<uint32_t>(b) << 16};
  return v.f;
}

// Bulk conversions of n elements; src and dst must not overlap.
void FloatToHalf(const float* src, uint16_t* dst, size_t n);
void HalfToFloat(const uint16_t* src, float* dst, size_t n);
void FloatToBFloat16(const float* src, uint16_t* dst, size_t n);
void BFloat16ToFloat(const uint16_t* src, float* dst, size_t n);

}  // namespace tally
