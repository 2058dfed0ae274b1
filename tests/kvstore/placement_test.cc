#include "kvstore/placement.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <gtest/gtest.h>

#include "tests/models/resnet50_sizes.h"

namespace tally {
namespace {

TEST(Placement, ResNet50IsBalancedWithinTwoPercent) {
  std::vector<int64_t> sizes = testing::ResNet50ParameterSizes();
  ASSERT_EQ(sizes.size(), 161u);
  ASSERT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), 25557032);
  for (int servers : {2, 4, 8, 16}) {
    Placement p = Placement::Compute(sizes, servers);
    std::vector<int64_t> load = p.ServerLoads();
    double mean = std::accumulate(load.begin(), load.end(), 0.0) / servers;
    double ratio = *std::max_element(load.begin(), load.end()) / mean;
    std::printf("resnet50 on %2d servers: max/mean bytes = %.4f (slice bound %ld elements)\n", servers,
                ratio, static_cast<long>(p.slice_bound()));
    EXPECT_LE(ratio, 1.02) << servers << " servers";
  }
}

TEST(Placement, SlicesCoverEveryKeyExactlyOnce) {
  std::vector<int64_t> sizes = {3000000, 500, 400, 300, 0, 7};
  for (int servers : {1, 2, 3, 5}) {
    Placement p = Placement::Compute(sizes, servers);
    for (size_t k = 0; k < sizes.size(); ++k) {
      int64_t next = 0;
      for (const Placement::Slice& s : p.slices(static_cast<int>(k))) {
        EXPECT_EQ(s.offset, next) << "key " << k;
        EXPECT_GE(s.server, 0);
        EXPECT_LT(s.server, servers);
        next += s.length;
      }
      EXPECT_EQ(next, sizes[k]) << "key " << k << " on " << servers << " servers";
    }
  }
}

TEST(Placement, MatchesTheDocumentedExample) {
  Placement p = Placement::Compute({3000000, 500, 400, 300}, 2);
  // Two slices of 1500000, each cut into two parts of 750000.
  ASSERT_EQ(p.slices(0).size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p.slices(0)[i].offset, 750000 * i);
    EXPECT_EQ(p.slices(0)[i].length, 750000);
    EXPECT_EQ(p.slices(0)[i].server, i / 2);
  }
  EXPECT_EQ(p.slices(1)[0].server, 0);
  EXPECT_EQ(p.slices(2)[0].server, 1);
  EXPECT_EQ(p.slices(3)[0].server, 1);
}

// A 100 MB key on one server travels as 25 parts of at most 2^20 values, in order.
TEST(Placement, LargeSlicesAreCutIntoPartsOnTheirServer) {
  const int64_t n = 25 * (int64_t{1} << 20) - 7;
  Placement p = Placement::Compute({n, 10}, 1);
  ASSERT_EQ(p.slices(0).size(), 25u);
  int64_t next = 0;
  for (const Placement::Slice& s : p.slices(0)) {
    EXPECT_EQ(s.server, 0);
    EXPECT_EQ(s.offset, next);
    EXPECT_LE(s.length, Placement::kPartElements);
    EXPECT_GE(s.length, Placement::kPartElements - 1);
    next += s.length;
  }
  EXPECT_EQ(next, n);
  EXPECT_EQ(p.slices(1).size(), 1u);
}

TEST(Placement, IsAPureFunctionOfSizesAndServers) {
  std::vector<int64_t> sizes = testing::ResNet50ParameterSizes();
  Placement a = Placement::Compute(sizes, 8), b = Placement::Compute(sizes, 8);
  for (int k = 0; k < a.num_keys(); ++k) {
    ASSERT_EQ(a.slices(k).size(), b.slices(k).size());
    for (size_t i = 0; i < a.slices(k).size(); ++i) {
      EXPECT_EQ(a.slices(k)[i].server, b.slices(k)[i].server);
      EXPECT_EQ(a.slices(k)[i].offset, b.slices(k)[i].offset);
    }
  }
}

}  // namespace
}  // namespace tally
