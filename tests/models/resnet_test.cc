// The ResNet family's structure (parameter counts, names, output shapes), its
// initialisation (zero_last_gamma, determinism, initialiser scale), BN's global-stats mode
// and the Status errors for bad configurations. Numerical agreement with PyTorch is
// resnet_torch_test.cc's.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "models/network.h"
#include "ops/ops.h"

namespace tally {
namespace {

std::unique_ptr<Network> Make(ModelConfig cfg) {
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  EXPECT_TRUE(s.ok()) << s;
  return net;
}

ModelConfig Config(int layers, int classes, Shape image) {
  ModelConfig cfg;
  cfg.num_layers = layers;
  cfg.num_classes = classes;
  cfg.image_shape = image;
  return cfg;
}

int64_t TrainableCount(Network* net) {
  int64_t n = 0;
  for (const Parameter* p : net->Parameters()) n += p->trainable ? p->value.numel() : 0;
  return n;
}

// The CIFAR ResNet 6n+2's trainable parameters, counted from its structure.
int64_t CifarCount(int n, int classes) {
  auto conv = [](int64_t in, int64_t out, int64_t k) { return in * out * k * k; };
  int64_t total = conv(3, 16, 3) + 2 * 16;
  int64_t in = 16;
  for (int64_t width : {16, 32, 64}) {
    for (int b = 0; b < n; ++b) {
      total += conv(in, width, 3) + conv(width, width, 3) + 4 * width;
      if (in != width) total += conv(in, width, 1) + 2 * width;  // projection shortcut
      in = width;
    }
  }
  return total + 64 * classes + classes;
}

TEST(ResNetTest, ParameterCountsMatchTorchvision) {
  const std::pair<int, int64_t> expected[] = {
      {18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}, {152, 60192808}};
  for (const auto& [layers, count] : expected) {
    auto net = Make(Config(layers, 1000, {3, 224, 224}));
    EXPECT_EQ(TrainableCount(net.get()), count) << "resnet" << layers;
  }
}

TEST(ResNetTest, CifarParameterCounts) {
  EXPECT_EQ(CifarCount(3, 10), 272474);  // ResNet-20, "0.27M" in He et al.
  for (int n : {1, 3, 9}) {
    auto net = Make(Config(6 * n + 2, 10, {3, 32, 32}));
    EXPECT_EQ(TrainableCount(net.get()), CifarCount(n, 10)) << "resnet" << 6 * n + 2;
  }
}

TEST(ResNetTest, NamesFollowTorchvisionStateDictOrder) {
  auto net = Make(Config(50, 1000, {3, 224, 224}));
  const auto& ps = net->Parameters();
  ASSERT_EQ(ps.size(), 267u);  // torchvision's state_dict without num_batches_tracked
  const char* head[] = {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                        "bn1.running_var", "layer1.0.conv1.weight", "layer1.0.bn1.weight"};
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(ps[i]->name, head[i]);
  EXPECT_EQ(ps[20]->name, "layer1.0.downsample.0.weight");
  EXPECT_EQ(ps[21]->name, "layer1.0.downsample.1.weight");
  EXPECT_EQ(ps[265]->name, "fc.weight");
  EXPECT_EQ(ps[266]->name, "fc.bias");
  EXPECT_EQ(ps[0]->value.shape(), (Shape{64, 7, 7, 3}));  // [K, R, S, C]
  EXPECT_FALSE(ps[3]->trainable);
  EXPECT_FALSE(ps[3]->grad.defined());
  EXPECT_TRUE(ps[1]->grad.defined());
}

TEST(ResNetTest, OutputShapesAndBackward) {
  struct Case { int layers, classes; Shape image; };
  for (const Case& c : {Case{18, 7, {3, 64, 48}}, Case{20, 10, {3, 32, 32}},
                        Case{8, 5, {1, 12, 12}}}) {
    auto net = Make(Config(c.layers, c.classes, c.image));
    Tensor x = Tensor::Empty({2, c.image[1], c.image[2], c.image[0]}, DType::kF32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37 * i);
    Tensor y = net->Forward(x, /*training=*/true);
    EXPECT_EQ(y.shape(), (Shape{2, c.classes})) << "resnet" << c.layers;
    Tensor dy = Tensor::Empty(y.shape(), DType::kF32);
    dy.Fill(0.5f);
    net->Backward(dy);
    for (const Parameter* p : net->Parameters()) {
      if (!p->trainable) continue;
      ASSERT_EQ(p->grad.shape(), p->value.shape()) << p->name;
      for (int64_t i = 0; i < p->grad.numel(); ++i) {
        ASSERT_TRUE(std::isfinite(p->grad.data<float>()[i])) << p->name;
      }
    }
    EXPECT_EQ(net->Forward(x, /*training=*/false).shape(), (Shape{2, c.classes}));
  }
}

TEST(ResNetTest, ZeroLastGammaZeroesTheLastBnOfEachBlock) {
  for (int layers : {50, 20}) {
    ModelConfig cfg = Config(layers, 10, {3, 32, 32});
    cfg.zero_last_gamma = true;
    auto net = Make(cfg);
    std::string last = layers == 50 ? ".bn3.weight" : ".bn2.weight";
    int zeroed = 0;
    for (const Parameter* p : net->Parameters()) {
      bool is_gamma = p->value.ndim() == 1 && p->name.find(".bn") != std::string::npos &&
                      p->name.rfind(".weight") == p->name.size() - 7;
      if (!is_gamma) continue;
      bool is_last = p->name.rfind("layer", 0) == 0 &&
                     p->name.size() > last.size() &&
                     p->name.compare(p->name.size() - last.size(), last.size(), last) == 0;
      float expected = is_last ? 0.0f : 1.0f;
      for (int64_t i = 0; i < p->value.numel(); ++i) {
        ASSERT_EQ(p->value.data<float>()[i], expected) << p->name;
      }
      zeroed += is_last;
    }
    EXPECT_EQ(zeroed, layers == 50 ? 16 : 9) << "one per residual block";
  }
}

TEST(ResNetTest, DeterministicForASeed) {
  ModelConfig cfg = Config(20, 10, {3, 32, 32});
  cfg.seed = 7;
  auto a = Make(cfg), b = Make(cfg);
  cfg.seed = 8;
  auto c = Make(cfg);
  bool any_differs = false;
  for (size_t i = 0; i < a->Parameters().size(); ++i) {
    const Tensor& va = a->Parameters()[i]->value;
    const Tensor& vb = b->Parameters()[i]->value;
    const Tensor& vc = c->Parameters()[i]->value;
    for (int64_t j = 0; j < va.numel(); ++j) {
      ASSERT_EQ(va.data<float>()[j], vb.data<float>()[j]) << a->Parameters()[i]->name;
      any_differs |= va.data<float>()[j] != vc.data<float>()[j];
    }
  }
  EXPECT_TRUE(any_differs) << "another seed gives other weights";
}

// The sample standard deviation of a large convolution's weights matches each initialiser.
TEST(ResNetTest, InitialiserScales) {
  for (const char* init : {"xavier", "msra"}) {
    ModelConfig cfg = Config(50, 1000, {3, 224, 224});
    cfg.initializer = init;
    auto net = Make(cfg);
    for (const Parameter* p : net->Parameters()) {
      if (p->name != "layer4.0.conv2.weight") continue;  // [512, 3, 3, 512]
      double fan_in = 3 * 3 * 512, fan_out = 512 * 3 * 3;
      double want = std::string(init) == "xavier"
                        ? std::sqrt(2.0 / fan_in)
                        : std::sqrt(2.0 / (1 + 0.0625) / ((fan_in + fan_out) / 2));
      double sum = 0, sq = 0;
      int64_t n = p->value.numel();
      for (int64_t i = 0; i < n; ++i) {
        sum += p->value.data<float>()[i];
        sq += static_cast<double>(p->value.data<float>()[i]) * p->value.data<float>()[i];
      }
      EXPECT_NEAR(sum / n, 0.0, 0.01 * want) << init;
      EXPECT_NEAR(std::sqrt(sq / n), want, 0.005 * want) << init;
    }
  }
}

TEST(ResNetTest, GlobalStatsModeLeavesRunningStatisticsAlone) {
  ModelConfig cfg = Config(20, 10, {3, 32, 32});
  cfg.bn_use_global_stats = true;
  auto net = Make(cfg);
  Tensor x = Tensor::Empty({2, 32, 32, 3}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.11 * i);
  Tensor train = net->Forward(x, /*training=*/true).Clone();
  Tensor dy = Tensor::Empty(train.shape(), DType::kF32);
  dy.Fill(1.0f);
  net->Backward(dy);
  for (const Parameter* p : net->Parameters()) {
    if (p->name.find("running_mean") == std::string::npos) continue;
    for (int64_t i = 0; i < p->value.numel(); ++i) ASSERT_EQ(p->value.data<float>()[i], 0.0f);
  }
  Tensor infer = net->Forward(x, /*training=*/false);
  for (int64_t i = 0; i < train.numel(); ++i) {
    ASSERT_EQ(train.data<float>()[i], infer.data<float>()[i]);
  }
}

TEST(ResNetTest, BadConfigsNameTheirFlag) {
  struct Case { ModelConfig cfg; const char* flag; const char* detail; };
  ModelConfig base = Config(50, 1000, {3, 224, 224});
  std::vector<Case> cases;
  ModelConfig c = base;
  c.network = "vgg";
  cases.push_back({c, "--network", "vgg"});
  for (int layers : {0, 2, 19, 21, 201}) {
    c = base;
    c.num_layers = layers;
    cases.push_back({c, "--num-layers", "18, 34, 50, 101, 152"});
  }
  for (Shape s : {Shape{3, 224}, Shape{4, 224, 224}, Shape{3, 16, 224}, Shape{3, 224, 0}}) {
    c = base;
    c.image_shape = s;
    cases.push_back({c, "--image-shape", "C = 3 (or 1"});
  }
  c = base;
  c.num_classes = 0;
  cases.push_back({c, "--num-classes", "at least 1"});
  c = base;
  c.initializer = "uniform";
  cases.push_back({c, "--initializer", "xavier or msra"});
  for (const Case& k : cases) {
    std::unique_ptr<Network> net;
    Status s = CreateNetwork(k.cfg, &net);
    EXPECT_FALSE(s.ok()) << k.flag;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(s.message().find(k.flag), std::string::npos) << s;
    EXPECT_NE(s.message().find(k.detail), std::string::npos) << s;
    EXPECT_EQ(net, nullptr);
  }
  c = base;
  c.num_layers = 20;
  c.image_shape = {1, 8, 8};  // grayscale CIFAR-style: fine
  std::unique_ptr<Network> net;
  EXPECT_TRUE(CreateNetwork(c, &net).ok());
}

}  // namespace
}  // namespace tally
