#include "base/parallel.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tally {
namespace {

// Every index runs exactly once, and the call returns only after all of them, with batches
// from several threads sharing the pool at once.
TEST(ParallelFor, EveryIndexOnceAcrossConcurrentBatches) {
  constexpr int kCallers = 4;
  constexpr size_t kN = 10000;
  std::vector<std::vector<std::atomic<int>>> runs(kCallers);
  for (auto& r : runs) r = std::vector<std::atomic<int>>(kN);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 3; ++rep) ParallelFor(kN, [&](size_t i) { runs[c][i].fetch_add(1); });
      for (size_t i = 0; i < kN; ++i) ASSERT_EQ(runs[c][i].load(), 3) << "caller " << c << " index " << i;
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_GE(ParallelForThreads(), 1u);
  EXPECT_LE(ParallelForThreads(), 8u);
}

TEST(ParallelFor, NoneAndOneRunOnTheCaller) {
  int calls = 0;
  ParallelFor(0, [&](size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  const std::thread::id me = std::this_thread::get_id();
  ParallelFor(1, [&](size_t i) {
    ++calls;
    EXPECT_EQ(i, 0u);
    EXPECT_EQ(std::this_thread::get_id(), me);
  });
  EXPECT_EQ(calls, 1);
}

// Every byte lands, whatever the size's remainder against the pieces, small and large.
TEST(ParallelCopy, CopiesEveryByteOfAnySize) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, (size_t{512} << 10) + 3, (size_t{9} << 20) + 17}) {
    std::vector<unsigned char> src(bytes), dst(bytes + 1, 0xAB);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    ParallelCopy(dst.data(), src.data(), bytes);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(dst[i], src[i]) << "byte " << i << " of " << bytes;
    EXPECT_EQ(dst[bytes], 0xAB) << "wrote past " << bytes << " bytes";
  }
}

}  // namespace
}  // namespace tally
