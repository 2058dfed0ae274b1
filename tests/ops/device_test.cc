// Devices as a machine without a usable GPU sees them: the messages that refuse cuda:N,
// the dispatcher's refusal of tensors on two devices, and pinned memory's fallback.
// (The same binary on a GPU machine checks the cuda:N that exist instead.)
#include <gtest/gtest.h>

#include "ops/device.h"
#include "ops/ops.h"
#include "base/tensor.h"

namespace tally {
namespace {

TEST(DeviceTest, BuildFlagMatchesTheLibrary) {
#ifdef TALLY_HAVE_CUDA
  EXPECT_TRUE(BuiltWithCuda());
#else
  EXPECT_FALSE(BuiltWithCuda());
  EXPECT_EQ(CudaDeviceCount(), 0);
#endif
}

TEST(DeviceTest, CpuIsAlwaysAvailable) {
  EXPECT_TRUE(CheckDevice(Device::Cpu(3)).ok());
  Device d;
  ASSERT_TRUE(ParseDevice("cpu:2", &d).ok());
  EXPECT_EQ(d, Device::Cpu(2));
  EXPECT_EQ(DeviceDescription(d), "cpu:2");
}

TEST(DeviceTest, MissingGpuIsRefusedWithTheReason) {
  const int count = CudaDeviceCount();
  const Device beyond{Device::Kind::kCuda, count};
  Status s = CheckDevice(beyond);
  ASSERT_FALSE(s.ok());
  const std::string name = beyond.ToString();
  EXPECT_NE(s.message().find(name), std::string::npos) << s;
  if (!BuiltWithCuda()) {
    EXPECT_NE(s.message().find("built without CUDA"), std::string::npos) << s;
  } else if (count == 0) {
    EXPECT_NE(s.message().find("no CUDA device is visible"), std::string::npos) << s;
  } else {
    EXPECT_NE(s.message().find("this machine has " + std::to_string(count)), std::string::npos) << s;
  }
  Device parsed;
  Status p = ParseDevice("gpu:" + std::to_string(count), &parsed);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.message(), s.message());
}

TEST(DeviceTest, BadDeviceTextNamesTheText) {
  Device d;
  Status s = ParseDevice("cuda:x", &d);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'cuda:x'"), std::string::npos) << s;
  s = ParseDevice("tpu:0", &d);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown device 'tpu:0'"), std::string::npos) << s;
}

// A tensor that claims to be on cuda:0 without any memory there: the dispatcher must refuse
// the mix before any backend touches the pointer.
TEST(DeviceDeathTest, OpsRefuseTensorsOnTwoDevices) {
  static float fake[4];
  Tensor on_gpu = Tensor::FromBlob(fake, {4}, DType::kF32, Device{Device::Kind::kCuda, 0},
                                   [](void*) {});
  Tensor a = Tensor::Zeros({4}, DType::kF32), y = Tensor::Empty({4}, DType::kF32);
  EXPECT_DEATH(Add(a, on_gpu, &y), "Add: tensors on different devices: float32\\[4\\]@cpu:0 and "
                                   "float32\\[4\\]@cuda:0");
  SgdSlot slot{a, y, Tensor(), on_gpu};
  EXPECT_DEATH(MultiSgdUpdate(SgdParams(), {slot}), "MultiSgdUpdate: tensors on different devices");
}

TEST(DeviceTest, PinnedMemoryIsUsableHostMemory) {
  Tensor t = PinnedEmpty({3, 5}, DType::kF32);
  EXPECT_TRUE(t.device().is_cpu());
  t.Fill(2.5f);
  EXPECT_EQ(t.data<float>()[14], 2.5f);
  EXPECT_EQ(IsPinned(t.raw_data()), CudaDeviceCount() > 0);
  Tensor ordinary = Tensor::Empty({3, 5}, DType::kF32);
  EXPECT_FALSE(IsPinned(ordinary.raw_data()));
}

TEST(DeviceTest, NodeLabelAndTf32Switch) {
  SetNodeLabel("worker 2 on host-b");
  EXPECT_EQ(NodeLabel(), "worker 2 on host-b");
  SetNodeLabel("");
  EXPECT_FALSE(AllowTf32());
  SetAllowTf32(true);
  EXPECT_TRUE(AllowTf32());
  SetAllowTf32(false);
}

}  // namespace
}  // namespace tally
