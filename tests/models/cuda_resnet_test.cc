// A whole ResNet on the GPU against the same network on the CPU: the same initial weights
// and images, one training forward and backward, in fp32 (TF32 off), fp16 and bf16, with the
// stem's input padded to 4 channels as the GPU trainer feeds it. Also the errors for a dtype
// or device a network cannot use. The GPU tests skip, visibly, without a GPU.
#include <gtest/gtest.h>

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

std::unique_ptr<Network> Make(const ModelConfig& cfg) {
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  EXPECT_TRUE(s.ok()) << s;
  return net;
}

// Relative errors allowed for a whole network: each op is held to 1e-5 / 2e-3 / 1e-2
// (tests/ops/cuda_compare.h); through 20 to 50 layers, and batch norm's division by the
// batch's spread, they add up to about ten times that.
double NetworkTolerance(DType t) {
  switch (t) {
    case DType::kF16: return 3e-2;
    case DType::kBF16: return 1e-1;
    default: return 1e-4;
  }
}

void CompareWithCpu(int layers, Shape image, int batch, DType dtype) {
  SetAllowTf32(false);
  ModelConfig cpu_cfg = Config(layers, image, 10);
  ModelConfig gpu_cfg = cpu_cfg;
  gpu_cfg.device = Gpu();
  gpu_cfg.dtype = dtype;
  gpu_cfg.input_channels = 4;
  std::unique_ptr<Network> cpu = Make(cpu_cfg), gpu = Make(gpu_cfg);
  ASSERT_TRUE(cpu && gpu);
  // The CPU starts from the weights as the GPU holds them (rounded to dtype).
  const std::vector<Parameter*>& cp = cpu->Parameters();
  const std::vector<Parameter*>& gp = gpu->Parameters();
  ASSERT_EQ(cp.size(), gp.size());
  for (size_t i = 0; i < cp.size(); ++i) cp[i]->value.CopyFrom(testing::ToHostF32(gp[i]->value));

  Rng rng(3);
  Tensor images = testing::Rounded(RandomTensor({batch, image[1], image[2], image[0]}, &rng), dtype);
  Tensor labels = Tensor::Empty({batch}, DType::kI32);
  for (int i = 0; i < batch; ++i) labels.data<int32_t>()[i] = i % 10;
  Tensor gpu_images = Tensor::Empty({batch, image[1], image[2], 4}, dtype, Gpu());
  PadLastDim(testing::ToDevice(images, dtype), &gpu_images);

  Tensor logits = cpu->Forward(images, true);
  Tensor dlogits = Tensor::Empty(logits.shape(), DType::kF32);
  SoftmaxCrossEntropy(logits, labels, 0.0f, 1.0f / batch, &dlogits);
  cpu->Backward(dlogits);

  Tensor glogits = gpu->Forward(gpu_images, true);
  ASSERT_EQ(glogits.dtype(), dtype);
  Tensor gdlogits = Tensor::Empty(glogits.shape(), dtype, Gpu());
  Tensor glabels = testing::ToDevice(labels, DType::kI32);
  SoftmaxCrossEntropy(glogits, glabels, 0.0f, 1.0f / batch, &gdlogits);
  gpu->Backward(gdlogits);

  const double tol = NetworkTolerance(dtype);
  const std::string what = "resnet-" + std::to_string(layers) + " " + DTypeName(dtype);
  EXPECT_LE(testing::RelativeError(glogits, logits), tol) << what << " logits";
  for (size_t i = 0; i < cp.size(); ++i) {
    const Tensor& want = cp[i]->trainable ? cp[i]->grad : cp[i]->value;
    const Tensor& got = gp[i]->trainable ? gp[i]->grad : gp[i]->value;
    EXPECT_LE(testing::RelativeError(got, want), tol)
        << what << " " << cp[i]->name << (cp[i]->trainable ? " grad" : "");
  }
}

TEST(CudaResNetTest, Resnet20MatchesCpu) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) CompareWithCpu(20, {3, 32, 32}, 16, dtype);
}

TEST(CudaResNetTest, Resnet50MatchesCpu) {
  TALLY_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF16}) CompareWithCpu(50, {3, 64, 64}, 4, dtype);
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
