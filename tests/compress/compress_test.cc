// The CPU gradient compression ops (compress/compress.h) against the fixtures computed by
// tools/make_compression_fixtures.py from MXNet 1.9's published algorithm: the packed bits
// and the residual of every push of each worker, and the server's sum of the dequantised
// pushes, value for value.
#include <gtest/gtest.h>

#include <vector>

#include "compress/compress.h"
#include "tests/compress/compress_fixture.h"

namespace tally {
namespace {

using testing::CompressionCase;
using testing::LoadCompressionFixtures;
using testing::SameBits;

TEST(Compression, MatchesTheFixturesPushByPush) {
  const std::vector<CompressionCase> cases = LoadCompressionFixtures();
  ASSERT_EQ(cases.size(), 5u);
  for (const CompressionCase& c : cases) {
    const size_t workers = c.pushes[0].grads.size();
    std::vector<std::vector<float>> residuals(workers, std::vector<float>(c.n, 0.0f));
    for (size_t step = 0; step < c.pushes.size(); ++step) {
      const auto& push = c.pushes[step];
      std::vector<float> sum(c.n, 0.0f), values(c.n);
      for (size_t w = 0; w < workers; ++w) {
        std::vector<uint8_t> packed(PackedBytes(c.config.type, c.n), 0xAB);
        Quantize(c.config, push.grads[w].data(), residuals[w].data(), c.n, packed.data());
        ASSERT_EQ(packed, push.packed[w]) << c.name << " step " << step << " worker " << w;
        for (int64_t i = 0; i < c.n; ++i) {
          ASSERT_TRUE(SameBits(residuals[w][i], push.residuals[w][i]))
              << c.name << " step " << step << " worker " << w << " residual " << i << ": " << residuals[w][i]
              << " vs " << push.residuals[w][i];
        }
        Dequantize(c.config, packed.data(), c.n, values.data());
        for (int64_t i = 0; i < c.n; ++i) sum[i] += values[i];
      }
      for (int64_t i = 0; i < c.n; ++i) {
        ASSERT_TRUE(SameBits(sum[i], push.sum[i])) << c.name << " step " << step << " sum " << i;
      }
    }
  }
}

TEST(Compression, PackedSizesAreWholeWords) {
  EXPECT_EQ(PackedBytes(CompressionType::kTwoBit, 0), 0);
  EXPECT_EQ(PackedBytes(CompressionType::kTwoBit, 1), 4);
  EXPECT_EQ(PackedBytes(CompressionType::kTwoBit, 16), 4);
  EXPECT_EQ(PackedBytes(CompressionType::kTwoBit, 17), 8);
  EXPECT_EQ(PackedBytes(CompressionType::kOneBit, 32), 4);
  EXPECT_EQ(PackedBytes(CompressionType::kOneBit, 33), 8);
  // ResNet-50's fc weight: 16x fewer bytes than fp32.
  EXPECT_EQ(PackedBytes(CompressionType::kTwoBit, 2048000) * 16, 2048000 * 4);
}

TEST(Compression, TwoBitCodesAndPadding) {
  CompressionConfig gc;
  ASSERT_TRUE(ParseCompression("2bit", 0.5f, &gc).ok());
  // +t, -t, 0, +t | -t: codes 11 10 00 11 | 10 00 00 00, then zero padding to 4 bytes.
  const std::vector<float> grad = {0.75f, -0.5f, 0.25f, 0.5f, -2.0f};
  std::vector<float> residual(grad.size(), 0.0f);
  std::vector<uint8_t> packed(PackedBytes(gc.type, 5), 0xFF);
  Quantize(gc, grad.data(), residual.data(), 5, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0xE3, 0x80, 0x00, 0x00}));
  EXPECT_EQ(residual, (std::vector<float>{0.25f, 0.0f, 0.25f, 0.0f, -1.5f}));
  // Code 01 is no value MXNet sends; it reads as 0, as MXNet's dequantisation does.
  const std::vector<uint8_t> odd = {0x40, 0, 0, 0};
  std::vector<float> out(1, 7.0f);
  Dequantize(gc, odd.data(), 1, out.data());
  EXPECT_EQ(out[0], 0.0f);
}

TEST(Compression, OneBitSendsPlusOrMinusOne) {
  CompressionConfig gc;
  ASSERT_TRUE(ParseCompression("1bit", 0.0f, &gc).ok());
  const std::vector<float> grad = {0.25f, -0.25f, 0.0f};
  std::vector<float> residual(3, 0.0f), out(3);
  std::vector<uint8_t> packed(PackedBytes(gc.type, 3));
  Quantize(gc, grad.data(), residual.data(), 3, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x80, 0, 0, 0}));  // only 0.25 > 0: 0 is not above it
  EXPECT_EQ(residual, (std::vector<float>{-0.75f, 0.75f, 1.0f}));
  Dequantize(gc, packed.data(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -1.0f, -1.0f}));
}

TEST(Compression, ParseRefusesBadSettings) {
  CompressionConfig gc;
  EXPECT_FALSE(ParseCompression("3bit", 0.5f, &gc).ok());
  EXPECT_FALSE(ParseCompression("2bit", 0.0f, &gc).ok());
  EXPECT_FALSE(ParseCompression("2bit", -1.0f, &gc).ok());
  EXPECT_TRUE(ParseCompression("none", 0.5f, &gc).ok());
  EXPECT_FALSE(gc.enabled());
}

// Large enough for the threads: the same bits as value by value in one thread.
TEST(Compression, ThreadedMatchesSmallCalls) {
  CompressionConfig gc;
  ASSERT_TRUE(ParseCompression("2bit", 0.5f, &gc).ok());
  const int64_t n = 1 << 20;
  std::vector<float> grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f;
  std::vector<float> r1(n, 0.1f), r2(n, 0.1f);
  std::vector<uint8_t> p1(PackedBytes(gc.type, n)), p2(PackedBytes(gc.type, n));
  Quantize(gc, grad.data(), r1.data(), n, p1.data());
  for (int64_t i = 0; i < n; i += 16) Quantize(gc, grad.data() + i, r2.data() + i, 16, p2.data() + i / 4);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(r1, r2);
}

}  // namespace
}  // namespace tally
