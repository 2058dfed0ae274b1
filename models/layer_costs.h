// Layer costs: what one training step of a network moves and computes, module group by
// module group — the groups whose parameters Forward announces together (Network's
// parameter-needed callback): the stem, each residual block, the classifier. What
// `tally bench scaling` replays and `tally plan` models, without computing anything.
//
//   ModelConfig cfg;  // resnet-50, 1000 classes, 3x224x224
//   std::vector<LayerGroup> groups;
//   TALLY_RETURN_IF_ERROR(LayerGroups(cfg, &groups));  // 18 groups, 161 keys, 25.6 M values
//   for (const LayerGroup& g : groups) ... g.keys, g.numel, g.flops ...
//
// FLOPs count the convolutions' and the classifier's multiply-adds as two each, per image,
// forward (a backward pass costs about twice as much); batch norm, ReLU, pooling and the
// residual adds are left out (about 1% of ResNet-50's arithmetic).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/network.h"

namespace tally {

struct LayerGroup {
  std::string name;            // "stem", "layer1.0", ..., "fc"
  std::vector<int> keys;       // its trainable parameters' indices (the kvstore keys), in order
  std::vector<int64_t> numel;  // each key's values
  double flops = 0;            // forward, per image
};

// The groups of cfg's network in forward order. Fails as CreateNetwork does for a bad cfg.
Status LayerGroups(const ModelConfig& cfg, std::vector<LayerGroup>* out);

}  // namespace tally
