// The thread count of every op. OpenMP's num-threads setting belongs to the thread that
// made it; keeping the wanted count here lets ApplyNumThreads re-apply it on whatever
// thread runs an op, which also sets oneDNN's count (it is built on the same OpenMP).
#include <omp.h>

#include <atomic>

#include "ops/cpu/parallel.h"
#include "ops/ops.h"

namespace tally {
namespace {
std::atomic<int> wanted_threads{0};
}  // namespace

void SetNumThreads(int n) {
  CHECK_GE(n, 0) << "SetNumThreads: negative thread count " << n;
  wanted_threads.store(n);
  if (n > 0) omp_set_num_threads(n);
}

int NumThreads() {
  int n = wanted_threads.load();
  return n > 0 ? n : omp_get_max_threads();
}

namespace cpu {
int ApplyNumThreads() {
  int n = wanted_threads.load();
  if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
  return n > 0 ? n : omp_get_max_threads();
}

int ThreadsFor(int64_t elements) {
  constexpr int64_t kSerialBelow = 1 << 15;
  const int n = ApplyNumThreads();
  return elements < kSerialBelow ? 1 : n;
}
}  // namespace cpu

}  // namespace tally
