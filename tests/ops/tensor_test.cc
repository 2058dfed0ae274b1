#include "base/tensor.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

TEST(Tensor, SliceAndReshapeShareStorage) {
  Tensor x = Tensor::Zeros({4, 3}, DType::kF32);
  Tensor rows = x.Slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  rows.data<float>()[0] = 5.f;
  EXPECT_EQ(x.data<float>()[3], 5.f);
  Tensor flat = x.Reshape({12});
  flat.data<float>()[11] = 7.f;
  EXPECT_EQ(x.data<float>()[11], 7.f);
  Tensor copy = x.Clone();
  copy.data<float>()[0] = 1.f;
  EXPECT_EQ(x.data<float>()[0], 0.f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.raw_data()) % 64, 0u);
}

TEST(Tensor, ConvertsBetweenDtypes) {
  Tensor x = Tensor::Empty({3}, DType::kF32);
  x.data<float>()[0] = 1.5f;
  x.data<float>()[1] = -2.f;
  x.data<float>()[2] = 65504.f;
  Tensor h = x.To(DType::kF16);
  Tensor b = h.To(DType::kBF16);
  Tensor back = b.To(DType::kF32);
  EXPECT_EQ(back.data<float>()[0], 1.5f);
  EXPECT_EQ(back.data<float>()[1], -2.f);
  EXPECT_EQ(back.data<float>()[2], 65536.f);  // bf16 has 8 bits of mantissa
  Tensor i = x.To(DType::kI32);
  EXPECT_EQ(i.data<int32_t>()[1], -2);
  EXPECT_EQ(i.ToString(), "int32[3]@cpu:0");
}

TEST(Tensor, FromBlobReleasesWhenTheLastViewGoes) {
  int released = 0;
  static float buffer[6];
  {
    Tensor t = Tensor::FromBlob(buffer, {2, 3}, DType::kF32, Device::Cpu(),
                                [&released](void*) { ++released; });
    Tensor view = t.Slice(1, 2);
    t = Tensor();
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

TEST(Tensor, NchwNhwcPermutationsAreInverse) {
  Tensor x = Tensor::Empty({2, 3, 4, 5}, DType::kF32);
  for (int i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  Tensor y = NchwToNhwc(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 5, 3}));
  // y[n=1, h=2, w=3, c=1] = x[1, 1, 2, 3]
  EXPECT_EQ(y.data<float>()[((1 * 4 + 2) * 5 + 3) * 3 + 1], x.data<float>()[((1 * 3 + 1) * 4 + 2) * 5 + 3]);
  Tensor z = NhwcToNchw(y);
  for (int i = 0; i < x.numel(); ++i) ASSERT_EQ(z.data<float>()[i], x.data<float>()[i]);
}

TEST(Tensor, BigHostBlocksAreReusedNotReallocated) {
  void* first;
  {
    Tensor a = Tensor::Empty({1 << 20}, DType::kF32);  // 4 MiB
    first = a.raw_data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 4096, 0u);
  }
  Tensor b = Tensor::Empty({1 << 20}, DType::kF32);
  EXPECT_EQ(b.raw_data(), first);
  Tensor c = Tensor::Empty({1 << 20}, DType::kF32);  // b is still alive: a new block
  EXPECT_NE(c.raw_data(), first);
}

TEST(Device, ParsesAndRefusesClearly) {
  Device d;
  ASSERT_TRUE(ParseDevice("cpu:3", &d).ok());
  EXPECT_EQ(d, Device::Cpu(3));
  EXPECT_EQ(d.ToString(), "cpu:3");
  ASSERT_TRUE(ParseDevice("cpu", &d).ok());
  EXPECT_EQ(d.index, 0);
  EXPECT_FALSE(ParseDevice("cpu:x", &d).ok());
  EXPECT_FALSE(ParseDevice("tpu:0", &d).ok());
  Status s = ParseDevice("cuda:0", &d);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos);
}

}  // namespace
}  // namespace tally
