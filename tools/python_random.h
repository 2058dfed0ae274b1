// CPython 3's `random` module generator, reproduced so that `tally im2rec --list` shuffles
// as MXNet's im2rec.py does with `random.seed(100); random.shuffle(image_list)`: the same
// seed gives the same order, and so the same train/val/test lists, image for image.
//
//   PythonRandom rng(100);             // random.seed(100)
//   rng.Shuffle(&items);               // random.shuffle(items)
//   uint64_t bits = rng.GetRandBits(7);  // random.getrandbits(7)
//
// What is reproduced (CPython's Modules/_randommodule.c and Lib/random.py; shuffle has drawn
// through _randbelow since 3.2): MT19937 seeded by init_by_array over the seed's 32-bit
// words, least significant first; getrandbits; _randbelow's rejection sampling; shuffle's
// Fisher-Yates from the end. Python 2's shuffle drew from random() instead and orders lists
// differently. tests/data/im2rec_test.cc checks all of it against the local python3.
//
// Not thread-safe: one generator per thread, as Python's module-level one is per process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tally {

class PythonRandom {
 public:
  // random.seed(seed) for a non-negative int (Python seeds with a negative int's absolute
  // value, so the caller passes that).
  explicit PythonRandom(uint64_t seed);

  // The generator's next 32-bit output (CPython's genrand_uint32).
  uint32_t NextUint32();

  // random.getrandbits(k): the top k bits of one output for k <= 32; above that, 32-bit
  // outputs filling the result from its least significant word up, the last one shifted.
  // REQUIRES: 0 <= k <= 64.
  uint64_t GetRandBits(int k);

  // random._randbelow(n): uniform in [0, n) by drawing bit_length(n) bits until below n.
  // REQUIRES: n > 0.
  uint64_t RandBelow(uint64_t n);

  // random.shuffle(x).
  template <typename T>
  void Shuffle(std::vector<T>* x) {
    for (std::size_t i = x->size(); i-- > 1;) {
      using std::swap;
      swap((*x)[i], (*x)[RandBelow(i + 1)]);
    }
  }

 private:
  static constexpr int kStateWords = 624;
  void Twist();

  std::array<uint32_t, kStateWords> state_;
  int index_;
};

}  // namespace tally
