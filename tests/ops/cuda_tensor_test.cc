// Tensors on a GPU: copies and dtype conversions in every direction against the host's
// conversions, fills, layout permutations, the caching allocator and pinned memory.
// Every test needs a GPU and says so when skipped.
#include <gtest/gtest.h>

#include <cstring>

#include "ops/device.h"
#include "base/tensor.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::Gpu;
using testing::RandomTensor;

const DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8};

// Values every dtype holds exactly after conversion from fp32 on the host (small integers
// for the integer types), so host and device conversions can be compared bit for bit.
Tensor Source(DType dtype, Rng* rng) {
  Tensor f = RandomTensor({3, 7, 5, 9}, rng, 0.0f, 200.0f);
  if (dtype == DType::kI32 || dtype == DType::kU8) {
    for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = static_cast<float>(static_cast<int>(f.data<float>()[i]));
  }
  return f.To(dtype);
}

void ExpectSameBytes(const std::string& what, const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  Tensor ha = Tensor::Empty(a.shape(), a.dtype()), hb = Tensor::Empty(b.shape(), b.dtype());
  ha.CopyFrom(a);
  hb.CopyFrom(b);
  EXPECT_EQ(0, std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes())) << what;
}

TEST(CudaTensorTest, ConversionsMatchTheHostInEveryDirection) {
  TALLY_REQUIRE_GPU();
  Rng rng(1);
  for (DType from : kAll) {
    for (DType to : kAll) {
      const std::string what = std::string(DTypeName(from)) + " -> " + DTypeName(to);
      Tensor src = Source(from, &rng);
      Tensor want = src.To(to);                        // host conversion
      Tensor up = Tensor::Empty(src.shape(), to, Gpu());
      up.CopyFrom(src);                                // host -> device, converting
      ExpectSameBytes(what + " (upload)", up, want);
      Tensor on_gpu = Tensor::Empty(src.shape(), from, Gpu());
      on_gpu.CopyFrom(src);
      ExpectSameBytes(what + " (on device)", on_gpu.To(to), want);
      Tensor down = Tensor::Empty(src.shape(), to);
      down.CopyFrom(on_gpu);                           // device -> host, converting
      ExpectSameBytes(what + " (download)", down, want);
    }
  }
}

TEST(CudaTensorTest, SlicesCloneFillAndZero) {
  TALLY_REQUIRE_GPU();
  Rng rng(2);
  Tensor host = RandomTensor({10, 33}, &rng);
  Tensor dev = testing::ToDevice(host, DType::kF32);
  ExpectSameBytes("slice", dev.Slice(3, 7), host.Slice(3, 7));
  ExpectSameBytes("clone", dev.Clone(), host);
  Tensor h16 = Tensor::Empty({1001}, DType::kF16), d16 = Tensor::Empty({1001}, DType::kF16, Gpu());
  h16.Fill(-3.25f);
  d16.Fill(-3.25f);
  ExpectSameBytes("fill f16", d16, h16);
  dev.SetZero();
  Tensor zeros = Tensor::Zeros(host.shape(), DType::kF32);
  ExpectSameBytes("zero", dev, zeros);
}

TEST(CudaTensorTest, LayoutPermutationsMatchTheHost) {
  TALLY_REQUIRE_GPU();
  Rng rng(3);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kU8}) {
    Tensor nchw = Source(dtype, &rng);
    Tensor dev = Tensor::Empty(nchw.shape(), dtype, Gpu());
    dev.CopyFrom(nchw);
    ExpectSameBytes(std::string("nchw->nhwc ") + DTypeName(dtype), NchwToNhwc(dev), NchwToNhwc(nchw));
    ExpectSameBytes(std::string("nhwc->nchw ") + DTypeName(dtype), NhwcToNchw(dev), NhwcToNchw(nchw));
  }
}

TEST(CudaTensorTest, FreedBlocksAreReusedWithoutCudaMalloc) {
  TALLY_REQUIRE_GPU();
  auto step = [] {
    Tensor a = Tensor::Empty({256, 56, 56, 64}, DType::kF16, Gpu());
    Tensor b = Tensor::Empty({1000}, DType::kF32, Gpu());
    Tensor c = Tensor::Empty({3, 3}, DType::kI32, Gpu());
    a.SetZero();
    b.Fill(1.0f);
    c.Fill(2.0f);
  };
  step();
  const DeviceMemoryStats before = GetDeviceMemoryStats(0);
  for (int i = 0; i < 5; ++i) step();
  const DeviceMemoryStats after = GetDeviceMemoryStats(0);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(after.peak_bytes_in_use, int64_t{256} * 56 * 56 * 64 * 2);
  EXPECT_GE(after.bytes_cached, int64_t{256} * 56 * 56 * 64 * 2);
  EmptyDeviceCache(0);
  EXPECT_EQ(GetDeviceMemoryStats(0).bytes_cached, 0);
}

TEST(CudaTensorTest, PinnedMemoryRoundTrip) {
  TALLY_REQUIRE_GPU();
  Rng rng(4);
  Tensor pinned = PinnedEmpty({64, 1024}, DType::kF32);
  EXPECT_TRUE(IsPinned(pinned.raw_data()));
  EXPECT_TRUE(IsPinned(pinned.Slice(10, 20).raw_data()));
  Tensor values = RandomTensor({64, 1024}, &rng);
  std::memcpy(pinned.raw_data(), values.raw_data(), values.nbytes());
  Tensor dev = Tensor::Empty({64, 1024}, DType::kF32, Gpu());
  dev.CopyFrom(pinned);
  Tensor back = PinnedEmpty({64, 1024}, DType::kF32);
  back.CopyFrom(dev);
  EXPECT_EQ(0, std::memcmp(back.raw_data(), values.raw_data(), values.nbytes()));
  EXPECT_NE(DeviceDescription(Gpu()).find("sm_"), std::string::npos) << DeviceDescription(Gpu());
}

}  // namespace
}  // namespace tally
