// models/init.h's "none" (a worker joining a running job): the random draws are skipped, and
// what a pull does not fill (BN running statistics) is set exactly as "xavier" sets it.
#include <string>

#include <gtest/gtest.h>

#include "models/init.h"
#include "models/network.h"

namespace tally {
namespace {

std::unique_ptr<Network> Make(const std::string& initializer) {
  ModelConfig cfg;
  cfg.num_layers = 8;
  cfg.num_classes = 4;
  cfg.image_shape = {3, 16, 16};
  cfg.seed = 7;
  cfg.initializer = initializer;
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  EXPECT_TRUE(s.ok()) << s;
  return net;
}

TEST(InitTest, NoDrawsSkipsOnlyTheTrainableWeightsDraws) {
  auto drawn = Make("xavier");
  auto joiner = Make(kNoDraws);
  ASSERT_TRUE(drawn && joiner);
  const auto& a = drawn->Parameters();
  const auto& b = joiner->Parameters();
  ASSERT_EQ(a.size(), b.size());
  int skipped = 0, kept = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor& va = a[i]->value;
    const Tensor& vb = b[i]->value;
    ASSERT_EQ(va.numel(), vb.numel()) << a[i]->name;
    const bool draws = b[i]->trainable && vb.ndim() > 1;
    for (int64_t j = 0; j < vb.numel(); ++j) {
      if (draws) {
        ASSERT_EQ(vb.data<float>()[j], 0.0f) << b[i]->name;
      } else {
        ASSERT_EQ(vb.data<float>()[j], va.data<float>()[j]) << b[i]->name;
      }
    }
    skipped += draws;
    kept += !b[i]->trainable;
  }
  EXPECT_GT(skipped, 0);
  EXPECT_GT(kept, 0) << "the running statistics are parameters that no pull fills";
}

TEST(InitTest, UnknownInitializerIsRefused) {
  std::unique_ptr<Network> net;
  ModelConfig cfg;
  cfg.num_layers = 8;
  cfg.num_classes = 4;
  cfg.image_shape = {3, 16, 16};
  cfg.initializer = "zeros";
  Status s = CreateNetwork(cfg, &net);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--initializer"), std::string::npos) << s;
}

}  // namespace
}  // namespace tally
