// Tally's parameter names under MXNet's schemes (models/mxnet_names.h), importing MXNet's
// and Gluon's arrays, and the symbol JSON (models/mxnet_symbol.h). MXNet itself runs these
// files in tests/tools/mxnet_compat_test.py.
#include "models/mxnet_names.h"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "models/mxnet_symbol.h"

namespace tally {
namespace {

std::unique_ptr<Network> Make(int layers, const std::string& network = "resnet", int classes = 5) {
  ModelConfig cfg;
  cfg.network = network;
  cfg.num_layers = layers;
  cfg.num_classes = classes;
  cfg.image_shape = layers == 20 ? Shape{3, 16, 16} : Shape{3, 32, 32};  // 20: CIFAR-style
  std::unique_ptr<Network> net;
  EXPECT_TRUE(CreateNetwork(cfg, &net).ok());
  return net;
}

// The network's parameters under `scheme`, as an MXNet file holds them.
std::vector<NamedTensor> AsMxnet(Network* net, MxnetScheme scheme) {
  std::vector<NamedTensor> arrays;
  for (const Parameter* p : net->Parameters()) {
    arrays.push_back({MxnetName(p->name, scheme), ToMxnetLayout(p->value)});
  }
  return arrays;
}

TEST(MxnetNames, EachSchemeNamesEveryParameterOnceAndModuleNamesInvert) {
  for (int layers : {18, 50, 20}) {
    std::unique_ptr<Network> net = Make(layers);
    for (MxnetScheme scheme : {MxnetScheme::kModule, MxnetScheme::kGluonV1, MxnetScheme::kGluonV1b}) {
      std::set<std::string> names;
      for (const Parameter* p : net->Parameters()) names.insert(MxnetName(p->name, scheme));
      EXPECT_EQ(names.size(), net->Parameters().size()) << MxnetSchemeName(scheme) << " resnet-" << layers;
    }
    for (const Parameter* p : net->Parameters()) {
      std::string back;
      ASSERT_TRUE(TallyNameOfModuleName(MxnetName(p->name, MxnetScheme::kModule), &back)) << p->name;
      EXPECT_EQ(back, p->name);
    }
  }
  std::string unused;
  EXPECT_FALSE(TallyNameOfModuleName("arg:bn_data_gamma", &unused));
  EXPECT_FALSE(TallyNameOfModuleName("stage1_unit1_bn9_foo", &unused));
}

TEST(MxnetNames, NamesAsMxnetAndGluonWriteThem) {
  const std::map<std::string, std::vector<std::string>> cases = {
      // Tally: Module (resnet-v1 symbol), Gluon v1, GluonCV v1b
      {"conv1.weight", {"arg:conv0_weight", "features.0.weight", "conv1.weight"}},
      {"bn1.running_var", {"aux:bn0_moving_var", "features.1.running_var", "bn1.running_var"}},
      {"layer1.0.bn2.running_mean",
       {"aux:stage1_unit1_bn2_moving_mean", "features.4.0.body.4.running_mean", "layer1.0.bn2.running_mean"}},
      {"layer1.0.conv3.weight", {"arg:stage1_unit1_conv3_weight", "features.4.0.body.6.weight", "layer1.0.conv3.weight"}},
      {"layer4.2.bn1.bias", {"arg:stage4_unit3_bn1_beta", "features.7.2.body.1.beta", "layer4.2.bn1.beta"}},
      {"layer2.0.downsample.0.weight",
       {"arg:stage2_unit1_conv1sc_weight", "features.5.0.downsample.0.weight", "layer2.0.downsample.0.weight"}},
      {"layer2.0.downsample.1.weight",
       {"arg:stage2_unit1_sc_gamma", "features.5.0.downsample.1.gamma", "layer2.0.downsample.1.gamma"}},
      {"fc.bias", {"arg:fc1_bias", "output.bias", "fc.bias"}},
  };
  for (const auto& [ours, theirs] : cases) {
    EXPECT_EQ(MxnetName(ours, MxnetScheme::kModule), theirs[0]);
    EXPECT_EQ(MxnetName(ours, MxnetScheme::kGluonV1), theirs[1]);
    EXPECT_EQ(MxnetName(ours, MxnetScheme::kGluonV1b), theirs[2]);
  }
}

TEST(MxnetNames, ImportsEachSchemeBackToTheSameWeights) {
  std::unique_ptr<Network> net = Make(50);
  for (MxnetScheme scheme : {MxnetScheme::kModule, MxnetScheme::kGluonV1, MxnetScheme::kGluonV1b}) {
    ImportedWeights w;
    Status s = ImportMxnetWeights("f.params", AsMxnet(net.get(), scheme), net->Parameters(), net->config(), {}, &w);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(w.scheme, scheme);
    ASSERT_EQ(w.params.size(), net->Parameters().size());
    for (size_t i = 0; i < w.params.size(); ++i) {
      const Parameter* p = net->Parameters()[i];
      EXPECT_EQ(w.params[i].name, p->name);
      ASSERT_EQ(w.params[i].tensor.shape(), p->value.shape()) << p->name;
      EXPECT_EQ(std::memcmp(w.params[i].tensor.raw_data(), p->value.raw_data(), p->value.nbytes()), 0) << p->name;
    }
  }
}

// Gluon's bottleneck v1 has biases on its 1x1 convolutions; they go into the running mean.
TEST(MxnetNames, GluonV1ConvolutionBiasesFoldIntoTheRunningMean) {
  std::unique_ptr<Network> net = Make(50, "resnet-v1");
  std::vector<NamedTensor> arrays = AsMxnet(net.get(), MxnetScheme::kGluonV1);
  Tensor bias = Tensor::Empty({64}, DType::kF32);
  for (int i = 0; i < 64; ++i) bias.data<float>()[i] = 0.25f * static_cast<float>(i);
  arrays.push_back({"features.4.0.body.0.bias", bias});
  ImportedWeights w;
  Status s = ImportMxnetWeights("g.params", arrays, net->Parameters(), net->config(), {}, &w);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < w.params.size(); ++i) {
    if (w.params[i].name != "layer1.0.bn1.running_mean") continue;
    const float* was = net->Parameters()[i]->value.data<float>();
    EXPECT_FLOAT_EQ(w.params[i].tensor.data<float>()[10], was[10] - 2.5f);
  }
}

TEST(MxnetNames, MismatchesAreRefusedNamingTheArray) {
  std::unique_ptr<Network> net = Make(18);
  const ModelConfig& cfg = net->config();
  ImportedWeights w;
  // MXNet's resnet-v1 symbol gives resnet-18's first unit a projection shortcut.
  std::vector<NamedTensor> extra = AsMxnet(net.get(), MxnetScheme::kModule);
  extra.push_back({"arg:stage1_unit1_conv1sc_weight", Tensor::Zeros({64, 64, 1, 1}, DType::kF32)});
  Status s = ImportMxnetWeights("m-0001.params", extra, net->Parameters(), cfg, {}, &w);
  EXPECT_NE(s.message().find("m-0001.params (MXNet Module (resnet-v1 symbol) names): has 1 arrays a resnet-18 does "
                             "not: 'stage1_unit1_conv1sc_weight' (MXNet's resnet-v1 symbol gives the first unit"),
            std::string::npos) << s;
  std::vector<NamedTensor> missing = AsMxnet(net.get(), MxnetScheme::kGluonV1);
  missing.erase(missing.begin() + 3);
  s = ImportMxnetWeights("g.params", missing, net->Parameters(), cfg, {}, &w);
  EXPECT_NE(s.message().find("lacks 1 parameters of a resnet-18: 'features.1.running_mean'"), std::string::npos) << s;
  // 1000 classes for a 5-class model: refused, unless the classifier may be new.
  std::unique_ptr<Network> imagenet = Make(18, "resnet", 1000);
  const std::vector<NamedTensor> big = AsMxnet(imagenet.get(), MxnetScheme::kGluonV1b);
  s = ImportMxnetWeights("v1b.params", big, net->Parameters(), cfg, {}, &w);
  EXPECT_NE(s.message().find("'fc.weight' has shape [1000,512], a resnet-18 with 5 classes has [5,512] there (fc.weight)"),
            std::string::npos) << s;
  ImportOptions fine_tune;
  fine_tune.allow_new_classifier = true;
  ASSERT_TRUE(ImportMxnetWeights("v1b.params", big, net->Parameters(), cfg, fine_tune, &w).ok());
  EXPECT_EQ(w.left_initial, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(w.params.size(), net->Parameters().size() - 2);
  // MXNet's pre-activation resnet is named as such.
  s = ImportMxnetWeights("v2.params", {{"arg:bn_data_gamma", Tensor::Zeros({3}, DType::kF32)}}, net->Parameters(),
                         cfg, {}, &w);
  EXPECT_NE(s.message().find("pre-activation resnet (v2)"), std::string::npos) << s;
}

TEST(MxnetSymbol, EveryParameterIsAVariableAndStridesFollowTheNetwork) {
  for (const std::string network : {"resnet", "resnet-v1"}) {
    std::unique_ptr<Network> net = Make(50, network);
    std::vector<NamedTensor> params;
    for (const Parameter* p : net->Parameters()) params.push_back({p->name, p->value});
    std::string json;
    ASSERT_TRUE(MxnetSymbolJson(net->config(), params, &json).ok());
    for (const Parameter* p : net->Parameters()) {
      const std::string var = "\"name\": \"" + MxnetName(p->name, MxnetScheme::kModule).substr(4) + "\"";
      EXPECT_NE(json.find(var), std::string::npos) << var;
    }
    EXPECT_NE(json.find("\"op\": \"SoftmaxOutput\""), std::string::npos);
    EXPECT_NE(json.find("\"num_hidden\": \"5\""), std::string::npos);
    // stage2_unit1's first (1x1) convolution strides 2 in resnet-v1, its 3x3 in resnet.
    const size_t conv1 = json.find("\"name\": \"stage2_unit1_conv1\"");
    const size_t conv2 = json.find("\"name\": \"stage2_unit1_conv2\"");
    ASSERT_NE(conv1, std::string::npos);
    ASSERT_NE(conv2, std::string::npos);
    const std::string first = json.substr(conv1, conv2 - conv1);
    EXPECT_EQ(first.find("\"stride\": \"(2, 2)\"") != std::string::npos, network == "resnet-v1") << network;
  }
  std::vector<NamedTensor> stray = {{"conv1.weight", Tensor::Zeros({64, 7, 7, 3}, DType::kF32)},
                                    {"head.weight", Tensor::Zeros({2}, DType::kF32)}};
  std::string json;
  EXPECT_FALSE(MxnetSymbolJson(ModelConfig(), stray, &json).ok());
}

}  // namespace
}  // namespace tally
