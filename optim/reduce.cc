#include "optim/reduce.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/parallel.h"

namespace tally {
namespace {

// Elements per block: 32 KiB of fp32 scratch, which stays in L1/L2 while it is added.
constexpr int64_t kBlock = 8192;
// A large array is cut into pieces of about this many elements, spread over the worker
// pool (base/parallel.h): waking a pool thread costs a few microseconds, converting or
// summing 256K elements a few tens.
constexpr int64_t kElementsPerPiece = int64_t{256} << 10;

// Calls fn(first, last) on ranges of blocks covering [0, blocks), in parallel when `work`
// elements are read in all and that is more than a piece.
template <typename Fn>
void ForBlockRanges(int64_t blocks, int64_t work, Fn fn) {
  const int64_t pieces = std::min<int64_t>(blocks, std::max<int64_t>(1, work / kElementsPerPiece));
  if (pieces <= 1) return fn(0, blocks);
  ParallelFor(static_cast<size_t>(pieces), [&](size_t p) {
    fn(blocks * static_cast<int64_t>(p) / pieces, blocks * (static_cast<int64_t>(p) + 1) / pieces);
  });
}

// Writes n values of src starting at element `begin` into dst as fp32.
void ToF32(const Tensor& src, int64_t begin, int64_t n, float* dst) {
  switch (src.dtype()) {
    case DType::kF32:
      std::memcpy(dst, src.data<float>() + begin, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::kF16:
      HalfToFloat(src.data<uint16_t>() + begin, dst, static_cast<size_t>(n));
      break;
    case DType::kBF16:
      BFloat16ToFloat(src.data<uint16_t>() + begin, dst, static_cast<size_t>(n));
      break;
    default:
      LOG(FATAL) << "SumInF32 of " << src.ToString();
  }
}

// Whether any of n values has every exponent bit set (NaN or ±Inf): exponent_mask selects
// them in the value's bit pattern. Comparing bits rather than calling std::isfinite keeps
// the loop vectorised whatever the floating-point flags.
template <typename Bits>
bool AnyAllOnesExponent(const void* data, int64_t n, Bits exponent_mask) {
  const Bits* v = static_cast<const Bits*>(data);
  unsigned bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<unsigned>((v[i] & exponent_mask) == exponent_mask);
  return bad != 0;
}

}  // namespace

bool AllFinite(const Tensor& t) {
  CHECK(IsWireDType(t.dtype()) && t.device().is_cpu()) << "AllFinite of " << t.ToString();
  const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
  const size_t size = DTypeSize(t.dtype());
  std::atomic<bool> finite{true};
  ForBlockRanges(blocks, n, [&](int64_t first, int64_t last) {
    const int64_t begin = first * kBlock, len = std::min(last * kBlock, n) - begin;
    const void* v = static_cast<const char*>(t.raw_data()) + begin * static_cast<int64_t>(size);
    bool bad;
    switch (t.dtype()) {
      case DType::kF32:
        bad = AnyAllOnesExponent(v, len, uint32_t{0x7f800000});
        break;
      case DType::kF16:
        bad = AnyAllOnesExponent(v, len, uint16_t{0x7c00});
        break;
      default:  // bf16: the high half of an fp32
        bad = AnyAllOnesExponent(v, len, uint16_t{0x7f80});
        break;
    }
    if (bad) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

bool IsWireDType(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

namespace {

// SumInF32, and whether every element of the sum is finite when `check`.
bool SumBlocks(const std::vector<Tensor>& parts, Tensor* out, bool check) {
  CHECK(!parts.empty());
  CHECK(out->dtype() == DType::kF32) << out->ToString();
  const int64_t n = out->numel();
  for (const Tensor& p : parts) {
    CHECK(p.numel() == n && IsWireDType(p.dtype()) && p.device().is_cpu())
        << "sum of " << p.ToString() << " into " << out->ToString();
  }
  float* acc = out->data<float>();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::atomic<bool> finite{true};
  auto sum_blocks = [&](int64_t first, int64_t last) {
    float scratch[kBlock];
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * kBlock, len = std::min(kBlock, n - begin);
      float* a = acc + begin;
      if (parts[0].raw_data() != out->raw_data()) ToF32(parts[0], begin, len, a);
      for (size_t r = 1; r < parts.size(); ++r) {
        const float* s;
        if (parts[r].dtype() == DType::kF32) {
          s = parts[r].data<float>() + begin;
        } else {
          ToF32(parts[r], begin, len, scratch);
          s = scratch;
        }
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) a[i] += s[i];
      }
      if (check && AnyAllOnesExponent(a, len, uint32_t{0x7f800000})) finite.store(false, std::memory_order_relaxed);
    }
  };
  ForBlockRanges(blocks, n * static_cast<int64_t>(parts.size()), sum_blocks);
  return finite.load();
}

}  // namespace

void SumInF32(const std::vector<Tensor>& parts, Tensor* out) { SumBlocks(parts, out, /*check=*/false); }

bool SumInF32AllFinite(const std::vector<Tensor>& parts, Tensor* out) { return SumBlocks(parts, out, /*check=*/true); }

Tensor ConvertForWire(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src;
  CHECK(IsWireDType(src.dtype()) && IsWireDType(dtype) && src.device().is_cpu())
      << "ConvertForWire of " << src.ToString() << " to " << DTypeName(dtype);
  Tensor out = Tensor::Empty(src.shape(), dtype);
  const int64_t n = src.numel(), blocks = (n + kBlock - 1) / kBlock;
  ForBlockRanges(blocks, n, [&](int64_t first, int64_t last) {
    float scratch[kBlock];
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * kBlock, len = std::min(kBlock, n - begin);
      const float* f = scratch;
      if (src.dtype() == DType::kF32) {
        f = src.data<float>() + begin;
      } else {
        ToF32(src, begin, len, scratch);
      }
      switch (dtype) {
        case DType::kF32:
          std::memcpy(out.data<float>() + begin, f, static_cast<size_t>(len) * sizeof(float));
          break;
        case DType::kF16:
          FloatToHalf(f, out.data<uint16_t>() + begin, static_cast<size_t>(len));
          break;
        default:
          FloatToBFloat16(f, out.data<uint16_t>() + begin, static_cast<size_t>(len));
          break;
      }
    }
  });
  return out;
}

}  // namespace tally
