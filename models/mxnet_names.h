// Tally's parameter names (torchvision's) under MXNet's naming schemes, and the arrays of an
// MXNet file brought into Tally's names and layout. The name maps are in docs/mxnet.md.
//
//   MxnetName("layer1.0.bn2.running_mean", MxnetScheme::kModule)
//       // "aux:stage1_unit1_bn2_moving_mean", as MXNet's resnet-v1 symbol names it
//   ImportedWeights w;
//   Status s = ImportMxnetWeights(path, file.arrays, net->Parameters(), cfg, {}, &w);
//   // w.params: Tally's names, convolutions [K, R, S, C], float32
//
// Schemes:
//   kModule    MXNet's image-classification resnet-v1 symbol in a Module checkpoint:
//              arg:conv0_weight, arg:bn0_gamma, aux:bn0_moving_mean,
//              arg:stage1_unit1_conv1_weight, arg:stage1_unit1_sc_beta, arg:fc1_bias ...
//   kGluonV1   Gluon model zoo resnet*_v1 (save_parameters): features.0.weight,
//              features.1.gamma, features.4.0.body.0.weight, features.5.0.downsample.1.beta,
//              output.weight ...
//   kGluonV1b  GluonCV resnet*_v1b: torchvision's names with BN gamma/beta for weight/bias.
// Every scheme's convolution weights are OIHW ([K, C, R, S]); Tally's are [K, R, S, C].
#pragma once

#include <string>
#include <vector>

#include "models/network.h"
#include "models/safetensors.h"

namespace tally {

enum class MxnetScheme { kModule, kGluonV1, kGluonV1b };

// "MXNet Module (resnet-v1 symbol)", "Gluon resnet_v1", "GluonCV resnet_v1b".
const char* MxnetSchemeName(MxnetScheme scheme);

// The name of Tally's parameter `name` under `scheme`; Module names carry MXNet's "arg:" or
// "aux:" (the batch-norm statistics). REQUIRES: name is a parameter of a Tally ResNet.
std::string MxnetName(const std::string& name, MxnetScheme scheme);
// The inverse for Module names (with or without "arg:"/"aux:"); false for a name that is
// not one of a Tally ResNet's.
bool TallyNameOfModuleName(const std::string& module_name, std::string* name);

// Tally's [K, R, S, C] convolution weights as MXNet's [K, C, R, S], and back; other tensors
// are returned as they are.
Tensor ToMxnetLayout(const Tensor& t);
Tensor FromMxnetLayout(const Tensor& t);

struct ImportOptions {
  // The classifier (fc) may have another class count than the network's: it is then left
  // at its initial values (fine-tuning from ImageNet weights).
  bool allow_new_classifier = false;
};

struct ImportedWeights {
  std::vector<NamedTensor> params;  // Tally's names, in the network's order, float32
  MxnetScheme scheme = MxnetScheme::kModule;
  std::vector<std::string> left_initial;  // parameters not taken from the file (the fc)
};

// Maps the arrays of MXNet file `path` (prefixes "arg:" / "aux:" allowed, arrays named
// "tally:..." ignored) onto `params`, the network's. The scheme is the one that names the
// most arrays. Fails naming the file and the array, with the scheme found, when an array
// is missing, left over, or of another shape; a pre-activation (v2) ResNet or Gluon's
// prefixed names of before MXNet 1.3 are named as such.
Status ImportMxnetWeights(const std::string& path, const std::vector<NamedTensor>& arrays,
                          const std::vector<Parameter*>& params, const ModelConfig& cfg,
                          const ImportOptions& options, ImportedWeights* out);

}  // namespace tally
