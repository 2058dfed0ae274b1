#include "base/host_blocks.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/tensor.h"

namespace tally {
namespace {

// A released block is handed out again for any size of its class, and only then: the
// counters tell a reuse from a fresh block.
TEST(HostBlocks, AReleasedBlockServesTheNextRequestOfItsClass) {
  const size_t bytes = (size_t{5} << 20) + 123;
  void* p = AllocateHostBlock(bytes);
  std::memset(p, 7, bytes);
  ReleaseHostBlock(p, bytes);
  const HostBlockCounts before = HostBlockCounters();
  void* q = AllocateHostBlock(bytes + 1000);  // another size of the same class
  const HostBlockCounts after = HostBlockCounters();
  EXPECT_EQ(q, p);
  EXPECT_EQ(after.reused, before.reused + 1);
  EXPECT_EQ(after.fresh, before.fresh);
  void* r = AllocateHostBlock(bytes);  // the only cached block is taken: a fresh one
  EXPECT_NE(r, q);
  EXPECT_EQ(HostBlockCounters().fresh, after.fresh + 1);
  ReleaseHostBlock(q, bytes + 1000);
  ReleaseHostBlock(r, bytes);
}

// Classes: never smaller than asked, at most an eighth more (and a page) above the minimum
// cached size; small sizes stay as asked.
TEST(HostBlocks, SizeClassesHoldTheRequestWithAtMostAnEighthMore) {
  EXPECT_EQ(HostBlockBytes(1000), 1000u);
  EXPECT_EQ(HostBlockBytes(kMinHostBlockBytes - 1), kMinHostBlockBytes - 1);
  std::set<size_t> classes;
  for (size_t b = kMinHostBlockBytes; b < (size_t{64} << 20); b = b * 9 / 8 + 4097) {
    const size_t c = HostBlockBytes(b);
    ASSERT_GE(c, b);
    ASSERT_LE(c, b + b / 8 + 4096) << b;
    ASSERT_EQ(HostBlockBytes(c), c) << "a class is its own class: " << b;
    classes.insert(c);
  }
  EXPECT_GT(classes.size(), 40u);
}

// Tensors of host memory take their storage from the same blocks, from any thread.
TEST(HostBlocks, TensorsOnManyThreadsReuseBlocks) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 50; ++i) {
        Tensor a = Tensor::Empty({(int64_t{1} << 18) + t}, DType::kF32);
        a.data<float>()[0] = 1.0f;
        ASSERT_EQ(reinterpret_cast<uintptr_t>(a.raw_data()) % 4096, 0u);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const HostBlockCounts c = HostBlockCounters();
  EXPECT_GT(c.reused, 150) << "fresh " << c.fresh;
}

}  // namespace
}  // namespace tally
