// Layer costs: ResNet-50's groups hold its 161 trainable arrays in the order Forward
// announces them, and its arithmetic is the published figure.
#include <gtest/gtest.h>

#include "models/layer_costs.h"

namespace tally {
namespace {

TEST(LayerCosts, ResNet50HasItsPublishedSizeAndArithmetic) {
  ModelConfig cfg;  // resnet-50, 1000 classes, 224x224
  std::vector<LayerGroup> groups;
  ASSERT_TRUE(LayerGroups(cfg, &groups).ok());
  ASSERT_EQ(groups.size(), 18u);  // the stem, 3 + 4 + 6 + 3 blocks, the classifier
  EXPECT_EQ(groups.front().name, "stem");
  EXPECT_EQ(groups[1].name, "layer1.0");
  EXPECT_EQ(groups.back().name, "fc");
  int keys = 0, last = -1;
  int64_t values = 0;
  double flops = 0;
  for (const LayerGroup& g : groups) {
    ASSERT_EQ(g.keys.size(), g.numel.size());
    for (size_t i = 0; i < g.keys.size(); ++i) {
      EXPECT_GT(g.keys[i], last) << g.name << ": keys out of forward order";
      last = g.keys[i];
      values += g.numel[i];
    }
    keys += static_cast<int>(g.keys.size());
    flops += g.flops;
  }
  EXPECT_EQ(keys, 161);
  EXPECT_EQ(values, 25557032);  // torchvision's resnet50: 25,557,032 parameters
  // 4.09 G multiply-adds per image (convolutions and fc), the figure published for it.
  EXPECT_NEAR(flops / 2, 4.09e9, 0.02 * 4.09e9);
  // The stem: one 7x7 convolution of 3 into 64 channels over 112x112 pixels.
  EXPECT_DOUBLE_EQ(groups.front().flops, 2.0 * 64 * 7 * 7 * 3 * 112 * 112);
  EXPECT_DOUBLE_EQ(groups.back().flops, 2.0 * 2048 * 1000);
}

TEST(LayerCosts, ABadModelFailsAsCreateNetworkDoes) {
  ModelConfig cfg;
  cfg.num_layers = 51;
  std::vector<LayerGroup> groups;
  const Status s = LayerGroups(cfg, &groups);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--num-layers"), std::string::npos) << s;
}

}  // namespace
}  // namespace tally
