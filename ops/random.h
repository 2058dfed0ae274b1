// Deterministic random numbers that are the same on every platform and compiler (the
// standard library's distributions are implementation-defined, so they are not used).
//
//   Rng rng(seed);               // splitmix64
//   float u = rng.Uniform();     // [0, 1)
//   float g = rng.Normal();      // N(0, 1), Box-Muller computed in double
//   uint64_t h = SplitMix64Hash(key);   // a stateless hash, for values indexed by position
//
// Not thread-safe; give each thread its own Rng (e.g. seeded from SplitMix64Hash(seed ^ t)).
#pragma once

#include <cmath>
#include <cstdint>

namespace tally {

// splitmix64's output function applied to x + 0x9E3779B97F4A7C15: a bijective mix of 64 bits.
inline uint64_t SplitMix64Hash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // splitmix64: the hash of a Weyl sequence.
  uint64_t Next() {
    uint64_t out = SplitMix64Hash(state_);
    state_ += 0x9e3779b97f4a7c15ull;
    return out;
  }
  // 24 random bits, so the value is exact in a float.
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  float Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = (static_cast<double>(Next() >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    double u2 = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  }
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>((Next() >> 32) * n >> 32); }

 private:
  uint64_t state_;
  bool has_spare_ = false;
  float spare_ = 0;
};

}  // namespace tally
