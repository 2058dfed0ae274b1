// Network: a model that maps an NHWC image batch to logits and back-propagates into its
// parameters. The ResNet family is built here from ops.
//
//   ModelConfig cfg;                  // resnet, 50 layers, 1000 classes, 3x224x224
//   std::unique_ptr<Network> net;
//   Status s = CreateNetwork(cfg, &net);
//   Tensor logits = net->Forward(images, /*training=*/true);     // [N, num_classes]
//   net->Backward(dlogits);            // fills every trainable Parameter's grad
//
// Parameters carry torchvision's state_dict names ("conv1.weight", "layer1.0.bn2.bias",
// "fc.weight", "bn1.running_mean", ...) in state_dict order, so weights move to and from
// PyTorch by name; convolution weights are stored [K, R, S, C] (PyTorch: [K, C, R, S]).
// A Network is used by one thread at a time; Forward keeps what Backward needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tally {

struct Parameter {
  std::string name;
  Tensor value;           // on the model's device; fp32, or the model's dtype (below)
  Tensor grad;            // value's shape, dtype and device; undefined for auxiliary states
  bool trainable = true;  // false: batch-norm running mean and variance
  // Batch-norm parameters and statistics stay fp32 whatever the model's dtype; convolution
  // and fully connected weights (and the fc bias) take the model's dtype.
  bool keep_f32 = false;
};

struct ModelConfig {
  // "resnet": torchvision's ResNet (v1b: a bottleneck's stride in its 3x3 convolution);
  // "resnet-v1": the stride in the bottleneck's first 1x1 convolution, as MXNet's resnet-v1
  // symbol and Gluon's resnet*_v1 (basic blocks and CIFAR depths are the same in both).
  std::string network = "resnet";
  int num_layers = 50;              // 18/34/50/101/152 ImageNet-style; 6n+2 (20, 56, ...) CIFAR-style
  int num_classes = 1000;
  Shape image_shape = {3, 224, 224};  // C, H, W as MXNet's --image-shape
  bool zero_last_gamma = false;     // zero the last BN gamma of every residual block
  bool bn_use_global_stats = false; // BN uses running statistics in training too (MXNet's flag)
  float bn_eps = 1e-5f;
  float bn_momentum = 0.9f;
  std::string initializer = "xavier";  // "xavier" (gaussian, in, magnitude 2) or "msra";
                                       // models/init.h has the exact rules
  uint64_t seed = 0;
  // Where the parameters and activations live, and the dtype of the activations and of the
  // convolution and fc weights (fp16 and bf16 need a cuda device). Parameters are
  // initialised in fp32 on the host (the same values on every device) and then moved.
  Device device = Device::Cpu();
  DType dtype = DType::kF32;
  // The channels images reach Forward with: image_shape[0] (0 means that), or more, the
  // extra ones zero (tensor cores want 4 or 8 in fp16). conv1's weight keeps
  // image_shape[0] input channels; the stem pads it to match.
  int input_channels = 0;
};

class Network {
 public:
  virtual ~Network() = default;
  // x: [N, H, W, C] on the model's device in its dtype, C = the input channels (ModelConfig).
  // training: batch statistics in BN (unless bn_use_global_stats). The logits have the
  // model's dtype.
  virtual Tensor Forward(const Tensor& x, bool training) = 0;
  // dlogits: [N, num_classes]. Overwrites the grad of every trainable parameter.
  // REQUIRES: the last Forward had training = true.
  virtual void Backward(const Tensor& dlogits) = 0;
  // Called during Backward, on the calling thread, once for each trainable parameter as soon
  // as its gradient is final (in backward order: the last layers first), so that its
  // communication can start while the backward pass goes on. The parameter's value may be
  // changed from the callback: Backward does not read it again.
  using GradientReadyFn = std::function<void(int param_index)>;
  virtual void SetGradientReadyCallback(GradientReadyFn fn) = 0;
  // Called during Forward, on the calling thread, once for each trainable parameter just
  // before the first layer that reads it (in forward order, a residual block's at a time),
  // so that a parameter's new value may still be arriving while earlier layers compute
  // (KVStore::WaitKey). Unset: Forward calls nothing.
  using ParameterNeededFn = std::function<void(int param_index)>;
  virtual void SetParameterNeededCallback(ParameterNeededFn fn) = 0;
  // Every parameter and auxiliary state, in torchvision's state_dict order. The pointers
  // stay valid for the Network's life.
  virtual const std::vector<Parameter*>& Parameters() = 0;
  virtual const ModelConfig& config() const = 0;
};

// The shape of a ResNet of a given depth: what models/resnet.cc builds, and what the
// exporters (ONNX, MXNet's symbol) walk.
struct ResNetDepth {
  bool imagenet;            // 7x7/2 stem convolution and 3x3/2 max pool, 4 stages of 64 << stage
  bool bottleneck;          // 1x1, 3x3, 1x1 with 4x the channels; else two 3x3
  std::vector<int> blocks;  // per stage
};
// 18/34/50/101/152 ImageNet-style, 6n+2 CIFAR-style; false for another depth.
bool LookupResNetDepth(int layers, ResNetDepth* depth);

// Whether a bottleneck strides in its first 1x1 convolution (cfg.network "resnet-v1").
inline bool StrideIn1x1(const ModelConfig& cfg) { return cfg.network == "resnet-v1"; }

// Builds and initialises a network from cfg (deterministic for cfg.seed). Fails, naming
// the flag, for an unknown network, an unsupported depth, a bad image shape, a device that
// is not there or a dtype the device cannot compute in.
Status CreateNetwork(const ModelConfig& cfg, std::unique_ptr<Network>* out);

}  // namespace tally
