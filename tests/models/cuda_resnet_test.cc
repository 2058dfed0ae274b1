// A whole ResNet on the GPU against the same network on the CPU: the same initial weights
// and images, one training forward and backward, in fp32 (TF32 off), fp16 and bf16, with the
// stem's input padded to 4 channels as the GPU trainer feeds it. Also the errors for a dtype
// or device a network cannot use. The GPU tests skip, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "models/network.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::Gpu;
using testing::RandomTensor;

ModelConfig Config(int layers, Shape image, int classes) {
  ModelConfig cfg;
  cfg.num_layers = layers;
  cfg.image_shape = image;
  cfg.num_classes = classes;
  cfg.seed = 11;
  return cfg;
}

// How many times further from the CPU than the probe the GPU may be (see CompareWithCpu).
constexpr double kProbeFactor = 8;

std::unique_ptr<Network> Make(const ModelConfig& cfg) {
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  EXPECT_TRUE(s.ok()) << s;
  return net;
}

// The unit roundoff of dtype: the largest relative error of rounding a value to it.
double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF16: return 0x1p-11;
    case DType::kBF16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

// One CPU training forward and backward on images; returns the logits.
Tensor CpuPass(Network* net, const Tensor& images, const Tensor& labels) {
  Tensor logits = net->Forward(images, true);
  Tensor dlogits = Tensor::Empty(logits.shape(), DType::kF32);
  SoftmaxCrossEntropy(logits, labels, 0.0f, 1.0f / images.shape()[0], &dlogits);
  net->Backward(dlogits);
  return logits;
}

// A whole network is compared with the CPU by how far it is from the CPU's result relative
// to how far the CPU's own result moves when its input moves by one rounding to dtype (the
// probe): through many layers of batch norm, whose backward pass subtracts nearly equal
// sums, a gradient can amplify one rounding of the input a thousandfold, so a fixed bound
// either misses a wrong kernel or fails a right one. A GPU rounds at every layer, the probe
// once, so the GPU may be a few times further off; a wrong kernel is off by far more. The
// floor keeps a gradient whose probe is below noise from asking for the impossible.
void CompareWithCpu(int layers, Shape image, int batch, DType dtype) {
  SetAllowTf32(false);
  ModelConfig cpu_cfg = Config(layers, image, 10);
  ModelConfig gpu_cfg = cpu_cfg;
  gpu_cfg.device = Gpu();
  gpu_cfg.dtype = dtype;
  gpu_cfg.input_channels = 4;
  std::unique_ptr<Network> cpu = Make(cpu_cfg), probe = Make(cpu_cfg), gpu = Make(gpu_cfg);
  ASSERT_TRUE(cpu && probe && gpu);
  // The CPU starts from the weights as the GPU holds them (rounded to dtype).
  const std::vector<Parameter*>& cp = cpu->Parameters();
  const std::vector<Parameter*>& pp = probe->Parameters();
  const std::vector<Parameter*>& gp = gpu->Parameters();
  ASSERT_EQ(cp.size(), gp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    cp[i]->value.CopyFrom(testing::ToHostF32(gp[i]->value));
    pp[i]->value.CopyFrom(cp[i]->value);
  }

  Rng rng(3);
  Tensor images = testing::Rounded(RandomTensor({batch, image[1], image[2], image[0]}, &rng), dtype);
  Tensor labels = Tensor::Empty({batch}, DType::kI32);
  for (int i = 0; i < batch; ++i) labels.data<int32_t>()[i] = i % 10;
  Tensor moved = Tensor::Empty(images.shape(), DType::kF32);
  const double u = UnitRoundoff(dtype);
  for (int64_t i = 0; i < images.numel(); ++i) {
    moved.data<float>()[i] = images.data<float>()[i] * static_cast<float>(1.0 + u * (2.0 * rng.Uniform() - 1.0));
  }
  Tensor gpu_images = Tensor::Empty({batch, image[1], image[2], 4}, dtype, Gpu());
  PadLastDim(testing::ToDevice(images, dtype), &gpu_images);

  Tensor logits = CpuPass(cpu.get(), images, labels);
  Tensor probe_logits = CpuPass(probe.get(), moved, labels);

  Tensor glogits = gpu->Forward(gpu_images, true);
  ASSERT_EQ(glogits.dtype(), dtype);
  Tensor gdlogits = Tensor::Empty(glogits.shape(), dtype, Gpu());
  Tensor glabels = testing::ToDevice(labels, DType::kI32);
  SoftmaxCrossEntropy(glogits, glabels, 0.0f, 1.0f / batch, &gdlogits);
  gpu->Backward(gdlogits);

  const double floor = 64 * u;
  const std::string what = "resnet-" + std::to_string(layers) + " " + DTypeName(dtype);
  auto expect_close = [&](const Tensor& got, const Tensor& want, const Tensor& probed, const std::string& name) {
    const double err = testing::RelativeError(got, want), probe_err = testing::RelativeError(probed, want);
    std::printf("%s %-32s gpu %.3g probe %.3g ratio %.3g\n", what.c_str(), name.c_str(), err, probe_err,
                err / std::max(probe_err, 1e-30));
    EXPECT_LE(err, std::max(floor, kProbeFactor * probe_err)) << what << " " << name << " (probe " << probe_err << ")";
  };
  expect_close(glogits, logits, probe_logits, "logits");
  for (size_t i = 0; i < cp.size(); ++i) {
    const bool g = cp[i]->trainable;
    expect_close(g ? gp[i]->grad : gp[i]->value, g ? cp[i]->grad : cp[i]->value,
                 g ? pp[i]->grad : pp[i]->value, cp[i]->name + (g ? " grad" : ""));
  }
}

TEST(CudaResNetTest, Resnet20MatchesCpu) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) CompareWithCpu(20, {3, 32, 32}, 16, dtype);
}

TEST(CudaResNetTest, Resnet50MatchesCpu) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) CompareWithCpu(50, {3, 64, 64}, 8, dtype);
}

TEST(ResNetDeviceTest, HalfPrecisionNeedsAGpu) {
  ModelConfig cfg = Config(20, {3, 32, 32}, 10);
  cfg.dtype = DType::kF16;
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--dtype float16 needs a GPU (--gpus)"), std::string::npos) << s;
  cfg.dtype = DType::kI32;
  s = CreateNetwork(cfg, &net);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not int32"), std::string::npos) << s;
}

TEST(ResNetDeviceTest, MissingGpuIsNamed) {
  ModelConfig cfg = Config(20, {3, 32, 32}, 10);
  cfg.device = Device{Device::Kind::kCuda, CudaDeviceCount()};
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(cfg.device.ToString()), std::string::npos) << s;
}

// Images with more channels than the weight (zero padding) give the same logits as without.
TEST(ResNetDeviceTest, PaddedInputChannelsChangeNothing) {
  ModelConfig cfg = Config(20, {3, 32, 32}, 10);
  ModelConfig padded = cfg;
  padded.input_channels = 4;
  std::unique_ptr<Network> a = Make(cfg), b = Make(padded);
  Rng rng(5);
  Tensor x = RandomTensor({2, 32, 32, 3}, &rng);
  Tensor xp = Tensor::Empty({2, 32, 32, 4}, DType::kF32);
  PadLastDim(x, &xp);
  Tensor ya = a->Forward(x, true), yb = b->Forward(xp, true);
  EXPECT_LE(testing::RelativeError(yb, ya), 1e-6);
  Tensor d = RandomTensor(ya.shape(), &rng);
  a->Backward(d);
  b->Backward(d);
  EXPECT_EQ(b->Parameters()[0]->grad.shape(), a->Parameters()[0]->grad.shape());
  EXPECT_LE(testing::RelativeError(b->Parameters()[0]->grad, a->Parameters()[0]->grad), 1e-5);
}

}  // namespace
}  // namespace tally
