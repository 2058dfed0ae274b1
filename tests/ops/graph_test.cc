// DeviceGraph as a machine without a usable GPU sees it: the devices it refuses and why.
// (On a GPU machine the cuda:N case checks the first device beyond those present.)
#include <gtest/gtest.h>

#include "ops/device.h"
#include "ops/graph.h"

#ifdef TALLY_HAVE_CUDA
#include "ops/cuda/capture.h"
#include "ops/cuda/check.h"
#endif

namespace tally {
namespace {

TEST(GraphTest, CpuDevicesAreRefusedByName) {
  bool ran = false;
  std::unique_ptr<DeviceGraph> graph;
  Status s = DeviceGraph::Capture({Device::Cpu(0)}, [&] { ran = true; }, &graph);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("cpu:0"), std::string::npos) << s;
  EXPECT_EQ(graph, nullptr);
  EXPECT_FALSE(ran);
}

TEST(GraphTest, NoDevicesIsRefused) {
  std::unique_ptr<DeviceGraph> graph;
  Status s = DeviceGraph::Capture({}, [] {}, &graph);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no devices"), std::string::npos) << s;
}

// cuda:0 on a machine without a GPU or in a build without CUDA (beyond the GPUs present on
// a GPU machine): CheckDevice's own message, and the body never runs.
TEST(GraphTest, MissingGpuIsRefusedWithCheckDevicesMessage) {
  const Device missing{Device::Kind::kCuda, CudaDeviceCount()};
  const Status expected = CheckDevice(missing);
  ASSERT_FALSE(expected.ok());
  bool ran = false;
  std::unique_ptr<DeviceGraph> graph;
  Status s = DeviceGraph::Capture({missing}, [&] { ran = true; }, &graph);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), expected.message());
  EXPECT_EQ(graph, nullptr);
  EXPECT_FALSE(ran);
  if (!BuiltWithCuda()) {
    EXPECT_NE(s.message().find("built without CUDA"), std::string::npos) << s;
  }
}

#ifdef TALLY_HAVE_CUDA
// What lets Capture return a Status: inside a body a failed CUDA call throws, outside it
// ends the process, as it always has. (No GPU needed: the call fails by itself.)
TEST(GraphTest, AFailedCallInsideABodyThrowsInsteadOfEndingTheProcess) {
  try {
    cuda::CaptureBodyScope scope;
    TALLY_CUDA_CHECK(cudaErrorInvalidValue);
    ADD_FAILURE() << "the failed call returned";
  } catch (const cuda::CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA error cudaErrorInvalidValue"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("graph_test.cc"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(cuda::CaptureBodyScope::Active());
}

TEST(GraphDeathTest, AFailedCallOutsideABodyStillEndsTheProcess) {
  EXPECT_DEATH(TALLY_CUDA_CHECK(cudaErrorInvalidValue), "CUDA error cudaErrorInvalidValue");
}
#endif

}  // namespace
}  // namespace tally
