#include "kvstore/comm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

namespace tally {
namespace {

std::unique_ptr<Comm> Host(int devices, MergedDType merged) {
  std::unique_ptr<Comm> comm;
  const Status s = NewComm(std::vector<Device>(devices, Device::Cpu()), merged, &comm);
  EXPECT_TRUE(s.ok()) << s;
  return comm;
}

// Values whose sum rounds differently in another order: 1e8 + 1 - 1e8 is 0 in fp32 from the
// left, 1 from the right.
Tensor Values(int64_t n, float scale, DType dtype) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = scale * (1.0f + 0.37f * static_cast<float>(i % 11));
  return t.To(dtype);
}

float F32(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF16: return HalfToFloat(t.data<uint16_t>()[i]);
    case DType::kBF16: return BFloat16ToFloat(t.data<uint16_t>()[i]);
    default: return t.data<float>()[i];
  }
}

TEST(Comm, HostSumAddsInDeviceOrderInFp32) {
  const int64_t n = 1000;
  const std::vector<Tensor> vals = {Values(n, 1e8f, DType::kF32), Values(n, 3.0f, DType::kF16),
                                    Values(n, -1e8f, DType::kF32), Values(n, 0.5f, DType::kBF16)};
  const Tensor merged = Host(4, MergedDType::kFloat32)->Reduce(7, vals);
  ASSERT_EQ(merged.dtype(), DType::kF32);
  ASSERT_EQ(merged.numel(), n);
  for (int64_t i = 0; i < n; ++i) {
    float expect = F32(vals[0], i);
    for (size_t d = 1; d < vals.size(); ++d) expect += F32(vals[d], i);
    ASSERT_EQ(merged.data<float>()[i], expect) << "element " << i;  // bit for bit, this order
  }
}

TEST(Comm, HostSumInTheValuesDtypeIsRoundedOnceFromFp32) {
  const int64_t n = 777;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const std::vector<Tensor> vals = {Values(n, 1000.0f, dtype), Values(n, 0.3f, dtype), Values(n, 0.3f, dtype)};
    const Tensor merged = Host(3, MergedDType::kAsValues)->Reduce(0, vals);
    ASSERT_EQ(merged.dtype(), dtype);
    Tensor f32 = Tensor::Empty({n}, DType::kF32);
    for (int64_t i = 0; i < n; ++i) f32.data<float>()[i] = F32(vals[0], i) + F32(vals[1], i) + F32(vals[2], i);
    const Tensor expect = f32.To(dtype);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(merged.data<uint16_t>()[i], expect.data<uint16_t>()[i]) << i;
  }
}

TEST(Comm, OneValueOfTheMergedDtypeIsReturnedAsItIs) {
  const Tensor f32 = Values(10, 1.0f, DType::kF32), f16 = Values(10, 1.0f, DType::kF16);
  EXPECT_EQ(Host(1, MergedDType::kFloat32)->Reduce(1, {f32}).raw_data(), f32.raw_data());
  EXPECT_EQ(Host(1, MergedDType::kAsValues)->Reduce(1, {f16}).raw_data(), f16.raw_data());
  const Tensor widened = Host(1, MergedDType::kFloat32)->Reduce(1, {f16});
  ASSERT_EQ(widened.dtype(), DType::kF32);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(widened.data<float>()[i], F32(f16, i));
}

// A sum still held (its slices on their way to a server) is never overwritten by the key's
// next sum; a released one is reused, so steady steps allocate nothing.
TEST(Comm, AHeldSumIsLeftAloneAndAReleasedOneReused) {
  std::unique_ptr<Comm> comm = Host(2, MergedDType::kAsValues);
  const std::vector<Tensor> ones = {Values(64, 1.0f, DType::kF32), Values(64, 1.0f, DType::kF32)};
  const std::vector<Tensor> twos = {Values(64, 2.0f, DType::kF32), Values(64, 2.0f, DType::kF32)};
  const void* released = nullptr;
  {
    const Tensor first = comm->Reduce(3, ones);
    const Tensor held = first.Slice(0, 32);  // a slice waiting to be sent
    const Tensor second = comm->Reduce(3, twos);
    EXPECT_NE(second.raw_data(), first.raw_data());
    EXPECT_EQ(held.data<float>()[0], 2.0f * F32(ones[0], 0));
    EXPECT_EQ(second.data<float>()[0], 2.0f * F32(twos[0], 0));
    released = second.raw_data();
  }
  const Tensor third = comm->Reduce(3, ones);
  EXPECT_EQ(third.raw_data(), released);
  EXPECT_EQ(third.data<float>()[7], 2.0f * F32(ones[0], 7));
}

TEST(Comm, BroadcastConvertsIntoEveryOutput) {
  std::unique_ptr<Comm> comm = Host(3, MergedDType::kFloat32);
  const Tensor src = Values(20, 0.1f, DType::kF32);
  std::vector<Tensor> outs = {Tensor::Zeros({20}, DType::kF32), Tensor::Zeros({4, 5}, DType::kF16),
                              Tensor::Zeros({20}, DType::kBF16)};
  comm->Broadcast(src, outs);
  const std::vector<Tensor> expect = {src, src.To(DType::kF16), src.To(DType::kBF16)};
  for (size_t d = 0; d < outs.size(); ++d) {
    for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(F32(outs[d], i), F32(expect[d], i)) << "device " << d;
  }
}

TEST(Comm, NewCommRefusesWhatItCannotSum) {
  std::unique_ptr<Comm> comm;
  EXPECT_FALSE(NewComm({}, MergedDType::kFloat32, &comm).ok());
  Status s = NewComm({Device::Cpu(), Device{Device::Kind::kCuda, 0}}, MergedDType::kAsValues, &comm);
  EXPECT_NE(s.message().find("mixed"), std::string::npos) << s;
  s = NewComm({Device{Device::Kind::kCuda, 0}}, MergedDType::kFloat32, &comm);
  EXPECT_NE(s.message().find("NCCL sums in the values' dtype"), std::string::npos) << s;
  EXPECT_EQ(comm, nullptr);
}

}  // namespace
}  // namespace tally
