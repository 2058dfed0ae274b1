#include "tools/python_random.h"

#include <algorithm>

#include <glog/logging.h>

namespace tally {
namespace {

// MT19937's published parameters (Matsumoto and Nishimura, 1998) and the constants of its
// 2002 seeding routines, which CPython uses unchanged.
constexpr int kN = 624;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperBit = 0x80000000u;
constexpr uint32_t kLowerBits = 0x7fffffffu;
constexpr uint32_t kArraySeed = 19650218u;

}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  static_assert(kStateWords == kN);
  // Python passes the seed's absolute value as 32-bit words, least significant first, and
  // always at least one word (so 0 seeds with the key {0}).
  std::vector<uint32_t> key = {static_cast<uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<uint32_t>(seed >> 32));

  // init_genrand(19650218): the linear recurrence that fills the state from one word.
  state_[0] = kArraySeed;
  for (uint32_t i = 1; i < kN; ++i) state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + i;
  // init_by_array: mixes the key in, cycling over it, then scrambles once more. Index 0 is
  // refreshed from the last word whenever the walk wraps.
  uint32_t i = 1;
  size_t j = 0;
  for (size_t k = std::max<size_t>(kN, key.size()); k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    if (++i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
    if (++j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) - i;
    if (++i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
  }
  state_[0] = kUpperBit;  // the state must not be all zero
  index_ = kN;            // the first draw regenerates the whole state
}

// Regenerates all 624 words at once. Walking the array in order with indices taken modulo
// N reads, past the end, words this pass already rewrote, which is what the recurrence wants.
void PythonRandom::Twist() {
  for (int k = 0; k < kN; ++k) {
    const uint32_t y = (state_[k] & kUpperBit) | (state_[(k + 1) % kN] & kLowerBits);
    state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  index_ = 0;
}

uint32_t PythonRandom::NextUint32() {
  if (index_ >= kN) Twist();
  uint32_t y = state_[index_++];
  // Tempering: spreads the state word's bits so that every output bit is equidistributed.
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t PythonRandom::GetRandBits(int k) {
  CHECK(k >= 0 && k <= 64) << "GetRandBits(" << k << ")";
  if (k == 0) return 0;
  if (k <= 32) return NextUint32() >> (32 - k);
  const uint64_t low = NextUint32();
  const uint64_t high = NextUint32() >> (64 - k);
  return (high << 32) | low;
}

uint64_t PythonRandom::RandBelow(uint64_t n) {
  CHECK(n > 0) << "RandBelow(0)";
  const int k = 64 - __builtin_clzll(n);  // Python's n.bit_length(): n itself may need all k bits
  uint64_t r = GetRandBits(k);
  while (r >= n) r = GetRandBits(k);
  return r;
}

}  // namespace tally
