#include "base/dtype.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

namespace tally {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kU8: return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kU8: return "uint8";
  }
  return "?";
}

Status ParseDType(const std::string& name, DType* out) {
  struct { const char* long_name; const char* short_name; DType t; } table[] = {
      {"float32", "f32", DType::kF32}, {"float16", "f16", DType::kF16},
      {"bfloat16", "bf16", DType::kBF16}, {"int32", "i32", DType::kI32},
      {"uint8", "u8", DType::kU8}};
  for (const auto& e : table) {
    if (name == e.long_name || name == e.short_name) {
      *out = e.t;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown dtype '" + name +
                                 "' (expected float32, float16, bfloat16, int32 or uint8)");
}

static uint32_t Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

uint16_t FloatToHalf(float f) {
  uint32_t x = Bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: let the FPU round for us
    float r = FromBits(abs) + 0.5f;  // 0.5 = 2^-1, aligns the half subnormal ulp (2^-24) to bit 0
    return static_cast<uint16_t>(sign | (Bits(r) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return FromBits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return FromBits(sign | Bits(v));
  }
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

__attribute__((target("avx2,f16c"))) static void FloatToHalfF16c(const float* src, uint16_t* dst,
                                                                   size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

__attribute__((target("avx2,f16c"))) static void HalfToFloatF16c(const uint16_t* src, float* dst,
                                                                   size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

// F16C is read from CPUID itself: clang's __builtin_cpu_supports does not know "f16c".
static bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return has;
}

void FloatToHalf(const float* src, uint16_t* dst, size_t n) {
  if (HasF16c()) return FloatToHalfF16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

void HalfToFloat(const uint16_t* src, float* dst, size_t n) {
  if (HasF16c()) return HalfToFloatF16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

// The bf16 loops are plain integer arithmetic the compiler vectorises at -O3.
void FloatToBFloat16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}

void BFloat16ToFloat(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
}

}  // namespace tally
