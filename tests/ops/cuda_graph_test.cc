// DeviceGraph on GPUs (ops/graph.h): replays equal the same ops run eagerly, nothing runs
// during Capture, a body that waits for the device fails with a Status and leaves the device
// usable, the graph's memory pool is kept from everyone else, and replays make no cudaMalloc.
// Every test needs a GPU and says so when skipped; the NCCL test needs two.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "ops/device.h"
#include "ops/graph.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "tests/ops/cuda_compare.h"

#ifdef TALLY_HAVE_CUDA
#include "kvstore/nccl_comm.h"
#endif

namespace tally {
namespace {

using testing::Gpu;
using testing::RandomTensor;
using testing::ToDevice;
using testing::ToHostF32;

const ConvParams kConv{1, 1, 1, 1};

// out = relu(conv(x, w)) + 0.5, through a temporary made and dropped on the way.
void Step(const Tensor& x, const Tensor& w, Tensor* conv, Tensor* out) {
  out->Fill(0.5f);
  Conv2dForward(x, w, kConv, conv);
  Tensor relu = Tensor::Empty(conv->shape(), conv->dtype(), conv->device());
  ReluForward(*conv, &relu);
  Add(relu, *out, out);
}

void ExpectSameValues(const std::string& what, const Tensor& got, const Tensor& want) {
  Tensor g = ToHostF32(got), w = ToHostF32(want);
  ASSERT_EQ(g.shape(), w.shape()) << what;
  EXPECT_EQ(0, std::memcmp(g.raw_data(), w.raw_data(), g.nbytes())) << what;
}

struct Operands {
  Tensor x, w, conv, out;
  explicit Operands(Device device) {
    Rng rng(7);
    x = Tensor::Empty({2, 8, 8, 16}, DType::kF32, device);
    w = Tensor::Empty({16, 3, 3, 16}, DType::kF32, device);
    x.CopyFrom(RandomTensor(x.shape(), &rng));
    w.CopyFrom(RandomTensor(w.shape(), &rng));
    conv = Tensor::Empty(Conv2dOutputShape(x.shape(), w.shape(), kConv), DType::kF32, device);
    out = Tensor::Empty(conv.shape(), DType::kF32, device);
  }
};

TEST(CudaGraphTest, ReplaysMatchTheOpsRunEagerly) {
  TALLY_REQUIRE_GPU();
  Operands graph_ops(Gpu()), eager_ops(Gpu());
  // Once eagerly first, as a training step would: the convolution's plan is built here.
  Step(eager_ops.x, eager_ops.w, &eager_ops.conv, &eager_ops.out);
  graph_ops.out.Fill(-7.0f);
  std::unique_ptr<DeviceGraph> graph;
  ASSERT_TRUE(DeviceGraph::Capture(
                  {Gpu()}, [&] { Step(graph_ops.x, graph_ops.w, &graph_ops.conv, &graph_ops.out); },
                  &graph)
                  .ok());
  ASSERT_NE(graph, nullptr);
  EXPECT_GE(graph->num_nodes(), 4);  // fill, convolution, relu, add at least
  Tensor untouched = Tensor::Empty(graph_ops.out.shape(), DType::kF32);
  untouched.Fill(-7.0f);
  ExpectSameValues("out after Capture, before any Launch", graph_ops.out, untouched);

  Rng rng(11);
  for (int replay = 0; replay < 3; ++replay) {
    const Tensor x = RandomTensor(graph_ops.x.shape(), &rng);
    graph_ops.x.CopyFrom(x);  // queued before the replay, which reads it
    graph->Launch();
    eager_ops.x.CopyFrom(x);
    Step(eager_ops.x, eager_ops.w, &eager_ops.conv, &eager_ops.out);
    const std::string what = "replay " + std::to_string(replay);
    // The same plans on the same values; within fp32's tolerance in case cuDNN's engine is
    // not deterministic.
    testing::ExpectClose(what + " conv", graph_ops.conv, eager_ops.conv, DType::kF32);
    testing::ExpectClose(what + " out", graph_ops.out, eager_ops.out, DType::kF32);
  }
}

TEST(CudaGraphTest, ReplaysMakeNoCudaMalloc) {
  TALLY_REQUIRE_GPU();
  Operands ops(Gpu());
  std::unique_ptr<DeviceGraph> graph;
  auto step = [&] { Step(ops.x, ops.w, &ops.conv, &ops.out); };
  step();  // eagerly first: plans and the cache's blocks
  ASSERT_TRUE(DeviceGraph::Capture({Gpu()}, step, &graph).ok());
  const DeviceMemoryStats before = GetDeviceMemoryStats(0);
  for (int i = 0; i < 10; ++i) graph->Launch();
  Synchronize(Gpu());
  const DeviceMemoryStats after = GetDeviceMemoryStats(0);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

// A body that waits for the device stops at the wait; Capture names the device and CUDA's
// error, nothing of the body runs, and the device works as before.
TEST(CudaGraphTest, WaitingInTheBodyFailsAndTheDeviceStaysUsable) {
  TALLY_REQUIRE_GPU();
  Tensor y = Tensor::Empty({1000}, DType::kF32, Gpu());
  y.Fill(1.0f);
  Tensor host = Tensor::Empty({1000}, DType::kF32);
  Tensor pinned = PinnedEmpty({1000}, DType::kF32);  // not freed in a body (see ops/graph.h)
  const std::vector<std::pair<std::string, std::function<void()>>> waits = {
      {"Synchronize", [] { Synchronize(Gpu()); }},
      {"a copy into host memory", [&] { host.CopyFrom(y); }},
      {"a copy into pinned host memory", [&] { pinned.CopyFrom(y); }},
  };
  for (const auto& [what, wait] : waits) {
    bool went_on = false;
    std::unique_ptr<DeviceGraph> graph;
    Status s = DeviceGraph::Capture({Gpu()}, [&] {
      y.Fill(2.0f);
      wait();
      went_on = true;
    }, &graph);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(graph, nullptr) << what;
    EXPECT_FALSE(went_on) << what << ": the body went on after the failed call";
    EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s;
    EXPECT_NE(s.message().find("CUDA error cuda"), std::string::npos) << s;  // CUDA's error name

    Tensor ones = Tensor::Empty({1000}, DType::kF32);
    ones.Fill(1.0f);
    ExpectSameValues(what + ": y, which the failed body would have filled", y, ones);
    Tensor z = Tensor::Empty({1000}, DType::kF32, Gpu());
    z.Fill(3.0f);
    Add(y, z, &z);
    Tensor fours = Tensor::Empty({1000}, DType::kF32);
    fours.Fill(4.0f);
    ExpectSameValues(what + ": an eager op after the failure", z, fours);
  }
  // And the next capture works.
  std::unique_ptr<DeviceGraph> graph;
  ASSERT_TRUE(DeviceGraph::Capture({Gpu()}, [&] { y.Fill(5.0f); }, &graph).ok());
  graph->Launch();
  Tensor fives = Tensor::Empty({1000}, DType::kF32);
  fives.Fill(5.0f);
  ExpectSameValues("y after the next capture's replay", y, fives);
}

TEST(CudaGraphTest, RefusesARepeatedDeviceAndANestedCaptureOfIt) {
  TALLY_REQUIRE_GPU();
  std::unique_ptr<DeviceGraph> graph;
  Status s = DeviceGraph::Capture({Gpu(), Gpu()}, [] {}, &graph);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuda:0: given twice"), std::string::npos) << s;

  Status inner;
  Tensor y = Tensor::Empty({10}, DType::kF32, Gpu());
  ASSERT_TRUE(DeviceGraph::Capture({Gpu()}, [&] {
    y.Fill(1.0f);
    std::unique_ptr<DeviceGraph> nested;
    inner = DeviceGraph::Capture({Gpu()}, [] {}, &nested);
  }, &graph).ok());
  ASSERT_FALSE(inner.ok());
  EXPECT_NE(inner.message().find("cuda:0: it is being captured already"), std::string::npos)
      << inner;
}

// Memory made in the body is the graph's: eager allocations after Capture get other blocks,
// EmptyDeviceCache leaves it alone, and it returns to the cache once the graph and the last
// tensor from it are gone.
TEST(CudaGraphTest, TheGraphsMemoryIsKeptFromEveryoneElse) {
  TALLY_REQUIRE_GPU();
  const Shape shape = {1 << 20};  // 4 MiB: a block of its own size class
  // A cold cache: a block of this size left by an earlier test would serve the capture
  // (joining its pool) or the eager allocations below without the cudaMalloc counted here.
  Synchronize(Gpu());
  EmptyDeviceCache(0);
  Tensor kept;
  void* temporary = nullptr;
  std::unique_ptr<DeviceGraph> graph;
  ASSERT_TRUE(DeviceGraph::Capture({Gpu()}, [&] {
    Tensor scratch = Tensor::Empty(shape, DType::kF32, Gpu());
    temporary = scratch.raw_data();
    scratch.Fill(1.0f);
    kept = Tensor::Empty(shape, DType::kF32, Gpu());
    Add(scratch, scratch, &kept);
  }, &graph).ok());
  ASSERT_NE(kept.raw_data(), temporary);

  const DeviceMemoryStats captured = GetDeviceMemoryStats(0);
  EmptyDeviceCache(0);
  EXPECT_GE(GetDeviceMemoryStats(0).bytes_cached, static_cast<int64_t>(kept.nbytes()))
      << "the freed temporary is the graph's, not the driver's";
  std::vector<Tensor> eager;
  for (int i = 0; i < 3; ++i) {
    eager.push_back(Tensor::Empty(shape, DType::kF32, Gpu()));
    EXPECT_NE(eager.back().raw_data(), kept.raw_data());
    EXPECT_NE(eager.back().raw_data(), temporary);
    eager.back().Fill(-1.0f);
  }
  graph->Launch();
  Tensor twos = Tensor::Empty(shape, DType::kF32);
  twos.Fill(2.0f);
  ExpectSameValues("kept after a replay", kept, twos);
  EXPECT_GT(GetDeviceMemoryStats(0).device_mallocs, captured.device_mallocs);

  graph.reset();
  ExpectSameValues("kept outlives its graph", kept, twos);
  kept = Tensor();
  eager.clear();
  const DeviceMemoryStats released = GetDeviceMemoryStats(0);
  std::vector<Tensor> again;
  for (int i = 0; i < 5; ++i) again.push_back(Tensor::Empty(shape, DType::kF32, Gpu()));
  EXPECT_EQ(GetDeviceMemoryStats(0).device_mallocs, released.device_mallocs)
      << "the pool's two blocks and the three eager ones serve five allocations";
}

#ifdef TALLY_HAVE_CUDA
// Work on two GPUs interleaved in one body, with an NCCL sum across them.
TEST(CudaGraphTest, CapturesTwoGpusWithAnNcclGroup) {
  TALLY_REQUIRE_TWO_GPUS();
  const std::vector<Device> gpus = {Gpu(), Device{Device::Kind::kCuda, 1}};
  std::unique_ptr<NcclComms> comms;
  ASSERT_TRUE(NcclComms::Create(gpus, &comms).ok());
  std::vector<Tensor> buffers = {Tensor::Empty({4096}, DType::kF32, gpus[0]),
                                 Tensor::Empty({4096}, DType::kF32, gpus[1])};
  auto body = [&] {
    buffers[0].Fill(1.0f);
    buffers[1].Fill(2.0f);
    comms->AllReduceSum({buffers});
    ReluForward(buffers[1], &buffers[1]);
  };
  body();  // NCCL's first collective sets up its connections outside any capture
  Synchronize(gpus[0]);
  Synchronize(gpus[1]);
  std::unique_ptr<DeviceGraph> graph;
  Status s = DeviceGraph::Capture(gpus, body, &graph);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GE(graph->num_nodes(), 5);
  Tensor threes = Tensor::Empty({4096}, DType::kF32);
  threes.Fill(3.0f);
  for (int replay = 0; replay < 3; ++replay) {
    buffers[0].SetZero();
    buffers[1].SetZero();
    graph->Launch();
    ExpectSameValues("cuda:0", buffers[0], threes);
    ExpectSameValues("cuda:1", buffers[1], threes);
  }
}
#endif

}  // namespace
}  // namespace tally
