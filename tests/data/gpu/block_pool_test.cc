// BlockPool (data/gpu/block_pool.h): blocks come back instead of new CUDA allocations, and
// a block is not handed out while work queued before its release may still use it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "data/gpu_loader.h"
#include "ops/device.h"
#include "tests/ops/cuda_compare.h"
#ifdef TALLY_HAVE_NVJPEG
#include "data/gpu/block_pool.h"
#endif

namespace tally {
namespace {

#define TALLY_REQUIRE_POOL()                                                      \
  TALLY_REQUIRE_GPU();                                                            \
  if (!GpuDecodeBuilt()) GTEST_SKIP() << "skipped: this build has no nvJPEG, so no GPU input path"

#ifdef TALLY_HAVE_NVJPEG
// Holds `stream` for about `ms` milliseconds (a host function queued on it): work that a
// released block's event must wait for.
void Busy(cudaStream_t stream, intptr_t ms) {
  auto sleep = [](void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms))); };
  ASSERT_EQ(cudaLaunchHostFunc(stream, sleep, reinterpret_cast<void*>(ms)), cudaSuccess);
}

TEST(BlockPool, ReusesABlockOnTheSameStreamAtOnce) {
  TALLY_REQUIRE_POOL();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    BlockPool pool(BlockPool::Kind::kDevice);
    void* a = pool.Allocate(1 << 20, s);
    ASSERT_NE(a, nullptr);
    Busy(s, 50);
    pool.Release(a, s);
    // Stream order keeps the next use of `a` after the busy kernel: no wait, no new block.
    EXPECT_EQ(pool.Allocate(900 << 10, s), a);
    EXPECT_EQ(pool.cuda_allocations(), 1);
    // A request far smaller than every free block gets its own block rather than a big one.
    void* b = pool.Allocate(1 << 22, s);
    pool.Release(b, s);
    void* c = pool.Allocate(1 << 10, s);
    EXPECT_NE(c, b);
    EXPECT_EQ(pool.cuda_allocations(), 3);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaStreamDestroy(s);
}

// For writers that ignore stream order (nvJPEG's hardware decoder), a device block asked for
// on the stream it was handed back on waits for its event like any other.
TEST(BlockPool, APoolNotStreamOrderedWaitsForTheWorkQueuedBeforeARelease) {
  TALLY_REQUIRE_POOL();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    BlockPool pool(BlockPool::Kind::kDevice, /*stream_ordered=*/false);
    void* a = pool.Allocate(1 << 20, s);
    ASSERT_NE(a, nullptr);
    Busy(s, 200);
    pool.Release(a, s);
    EXPECT_NE(pool.Allocate(1 << 20, s), a) << "handed out while work queued before its release still ran";
    EXPECT_EQ(pool.cuda_allocations(), 2);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(pool.Allocate(1 << 20, s), a) << "once that work has run, the block comes back";
    EXPECT_EQ(pool.cuda_allocations(), 2);
  }
  cudaStreamDestroy(s);
}

TEST(BlockPool, PinnedBlocksWaitForTheWorkQueuedBeforeTheirRelease) {
  TALLY_REQUIRE_POOL();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    BlockPool pool(BlockPool::Kind::kPinned);
    void* a = pool.Allocate(1 << 20, s);
    ASSERT_NE(a, nullptr);
    Busy(s, 200);  // the host would write into `a` while a queued copy still reads it
    pool.Release(a, s);
    void* b = pool.Allocate(1 << 20, s);
    EXPECT_NE(b, a) << "a pinned block was handed out while work queued before its release ran";
    EXPECT_EQ(pool.cuda_allocations(), 2);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(pool.Allocate(1 << 20, s), a) << "once that work has run, the block comes back";
    EXPECT_EQ(pool.cuda_allocations(), 2);
  }
  cudaStreamDestroy(s);
}
#else
TEST(BlockPool, ReusesABlockOnTheSameStreamAtOnce) { TALLY_REQUIRE_POOL(); }
TEST(BlockPool, APoolNotStreamOrderedWaitsForTheWorkQueuedBeforeARelease) { TALLY_REQUIRE_POOL(); }
TEST(BlockPool, PinnedBlocksWaitForTheWorkQueuedBeforeTheirRelease) { TALLY_REQUIRE_POOL(); }
#endif

}  // namespace
}  // namespace tally
