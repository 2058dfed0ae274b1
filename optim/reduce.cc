#include "optim/reduce.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace tally {
namespace {

// Elements per block: 32 KiB of fp32 scratch, which stays in L1/L2 while it is added.
constexpr int64_t kBlock = 8192;
// A sum gets one thread per this many elements read (starting a thread costs tens of
// microseconds; summing 4M elements, about a millisecond), up to kMaxSumThreads.
constexpr int64_t kElementsPerThread = int64_t{4} << 20;
constexpr int64_t kMaxSumThreads = 8;

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
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      return !AnyAllOnesExponent(t.raw_data(), n, uint32_t{0x7f800000});
    case DType::kF16:
      return !AnyAllOnesExponent(t.raw_data(), n, uint16_t{0x7c00});
    default:  // bf16: the high half of an fp32
      return !AnyAllOnesExponent(t.raw_data(), n, uint16_t{0x7f80});
  }
}

bool IsWireDType(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

void SumInF32(const std::vector<Tensor>& parts, Tensor* out) {
  CHECK(!parts.empty());
  CHECK(out->dtype() == DType::kF32) << out->ToString();
  const int64_t n = out->numel();
  for (const Tensor& p : parts) {
    CHECK(p.numel() == n && IsWireDType(p.dtype()) && p.device().is_cpu())
        << "sum of " << p.ToString() << " into " << out->ToString();
  }
  float* acc = out->data<float>();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
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
    }
  };
  // Big sums are split over short-lived threads that end with the sum. Not an OpenMP team:
  // its threads keep spinning for milliseconds after each sum, on the cores the transport's
  // threads need for the next message (1 MB pushes ran 20x slower that way).
  const int64_t work = n * static_cast<int64_t>(parts.size());
  const int threads = static_cast<int>(std::min<int64_t>(
      {static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())), kMaxSumThreads,
       work / kElementsPerThread, blocks}));
  if (threads <= 1) {
    sum_blocks(0, blocks);
    return;
  }
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) {
    helpers.emplace_back(sum_blocks, blocks * t / threads, blocks * (t + 1) / threads);
  }
  sum_blocks(0, blocks / threads);
  for (std::thread& h : helpers) h.join();
}

}  // namespace tally
