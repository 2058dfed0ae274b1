// MXNet's symbol JSON (`PREFIX-symbol.json`) for a Tally ResNet, so that MXNet's
// `mx.model.load_checkpoint(PREFIX, N)` and a Module run Tally's checkpoints as they are.
//
//   std::string json;
//   Status s = MxnetSymbolJson(cfg, checkpoint.params, &json);  // Tally's names and shapes
//   // nodes data, conv0_weight, conv0 (Convolution), bn0 (BatchNorm), relu0, pooling0,
//   // stage1_unit1_conv1 ... fc1 (FullyConnected), softmax (SoftmaxOutput)
//
// The graph is MXNet's image-classification resnet-v1 symbol in structure and names, with
// Tally's stride placement (ModelConfig::network) and batch-norm epsilon, and a projection
// shortcut only where Tally's network has one. Its parameters are named as
// MxnetName(..., MxnetScheme::kModule) names them. docs/mxnet.md shows a small one.
#pragma once

#include <string>
#include <vector>

#include "models/network.h"
#include "models/safetensors.h"

namespace tally {

// params: every parameter of the network cfg describes, Tally's names, convolutions
// [K, R, S, C] (only names and shapes are read). Fails naming a parameter the walk does not
// expect.
Status MxnetSymbolJson(const ModelConfig& cfg, const std::vector<NamedTensor>& params, std::string* json);

}  // namespace tally
