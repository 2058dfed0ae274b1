// The gradient-ready callback: once per trainable parameter, last layers first, and only
// when the gradient is final. The parameter-needed callback: once per trainable parameter,
// first layers first, before anything reads it.
#include <algorithm>

#include <gtest/gtest.h>

#include "models/network.h"
#include "ops/ops.h"

namespace tally {
namespace {

TEST(GradientReady, EveryTrainableParameterOnceInBackwardOrderWithItsFinalGradient) {
  ModelConfig cfg;
  cfg.num_layers = 20;
  cfg.num_classes = 5;
  cfg.image_shape = {3, 8, 8};
  std::unique_ptr<Network> net;
  ASSERT_TRUE(CreateNetwork(cfg, &net).ok());
  const auto& params = net->Parameters();
  std::vector<int> order;
  std::vector<Tensor> seen;  // copies of each gradient at the time of its call
  net->SetGradientReadyCallback([&](int i) {
    order.push_back(i);
    seen.push_back(params[i]->grad.Clone());
  });
  Tensor x = Tensor::Empty({2, 8, 8, 3}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 13) / 13.0f - 0.5f;
  Tensor logits = net->Forward(x, /*training=*/true);
  Tensor dlogits = Tensor::Empty(logits.shape(), DType::kF32);
  dlogits.Fill(0.1f);
  net->Backward(dlogits);

  int trainable = 0;
  for (const Parameter* p : params) trainable += p->trainable;
  ASSERT_EQ(static_cast<int>(order.size()), trainable);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a parameter announced twice";
  EXPECT_EQ(params[order.front()]->name, "fc.bias");
  EXPECT_EQ(params[order.back()]->name, "conv1.weight");
  for (size_t k = 1; k < order.size(); ++k) EXPECT_LT(order[k], order[k - 1]) << "not in backward order";
  for (size_t k = 0; k < order.size(); ++k) {
    const Tensor& final_grad = params[order[k]]->grad;
    for (int64_t j = 0; j < final_grad.numel(); ++j) {
      ASSERT_EQ(seen[k].data<float>()[j], final_grad.data<float>()[j]) << params[order[k]]->name;
    }
  }
}

// The callback writes each parameter's value as it is announced, from another network: if
// any layer read a parameter before its announcement, the output would differ from that
// network's.
TEST(ParameterNeeded, EveryTrainableParameterOnceInForwardOrderBeforeItIsRead) {
  ModelConfig cfg;
  cfg.num_layers = 20;
  cfg.num_classes = 5;
  cfg.image_shape = {3, 8, 8};
  std::unique_ptr<Network> net, other;
  ASSERT_TRUE(CreateNetwork(cfg, &net).ok());
  cfg.seed = 7;
  ASSERT_TRUE(CreateNetwork(cfg, &other).ok());
  const auto& params = net->Parameters();
  std::vector<int> order;
  net->SetParameterNeededCallback([&](int i) {
    order.push_back(i);
    params[i]->value.CopyFrom(other->Parameters()[i]->value);
  });
  Tensor x = Tensor::Empty({2, 8, 8, 3}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 11) / 11.0f - 0.5f;
  const Tensor got = net->Forward(x, /*training=*/true);
  const Tensor want = other->Forward(x, /*training=*/true);

  int trainable = 0;
  for (const Parameter* p : params) trainable += p->trainable;
  ASSERT_EQ(static_cast<int>(order.size()), trainable);
  EXPECT_EQ(params[order.front()]->name, "conv1.weight");
  EXPECT_EQ(params[order.back()]->name, "fc.bias");
  for (size_t k = 1; k < order.size(); ++k) EXPECT_GT(order[k], order[k - 1]) << "not in forward order";
  for (int64_t j = 0; j < want.numel(); ++j) {
    ASSERT_EQ(got.data<float>()[j], want.data<float>()[j]) << "logit " << j << ": a layer read a parameter before it was announced";
  }
}

}  // namespace
}  // namespace tally
