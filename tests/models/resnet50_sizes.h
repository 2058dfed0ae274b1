// The element counts of ResNet-50's 161 trainable parameters (25.6 M values), in state_dict
// order, taken from the model itself: for tests that need a real network's spread of sizes
// (key placement, the multi-tensor launch's chunking and update).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "models/network.h"

namespace tally {
namespace testing {

inline std::vector<int64_t> ResNet50ParameterSizes() {
  ModelConfig cfg;  // resnet-50, 1000 classes
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<int64_t> sizes;
  if (net == nullptr) return sizes;
  for (const Parameter* p : net->Parameters()) {
    if (p->trainable) sizes.push_back(p->value.numel());
  }
  return sizes;
}

}  // namespace testing
}  // namespace tally
