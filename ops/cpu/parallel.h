// Internal helpers shared by the CPU ops: the thread count every op runs with, and the
// split of a loop range among OpenMP threads. Not part of the public ops API.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tally {
namespace cpu {

// The count SetNumThreads asked for, or OpenMP's default when it was never called.
// Call on entry to an op: OpenMP keeps its thread count per calling thread, so a count
// set on the main thread does not reach a training thread by itself; this re-applies it.
int ApplyNumThreads();

// The thread count for a loop over `elements` values: 1 below about a cache's worth of
// work, where waking the team costs more than it saves (and a lot more when the cores
// are shared with other processes and the team's spin-waits compete with them).
int ThreadsFor(int64_t elements);

// The [begin, end) share of `n` items for thread `t` of `nt`: contiguous and balanced.
inline void ThreadRange(int64_t n, int t, int nt, int64_t* begin, int64_t* end) {
  int64_t q = n / nt, r = n % nt;
  *begin = t * q + std::min<int64_t>(t, r);
  *end = *begin + q + (t < r ? 1 : 0);
}

}  // namespace cpu
}  // namespace tally
