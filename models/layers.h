// The modules a ResNet is assembled from: convolution, batch norm (with the residual add
// and ReLU fused in), pooling and fully connected layers over NHWC tensors, each a thin
// owner of its Parameters around the ops in ops/ops.h. Outputs take the input's device and
// dtype; parameters are created fp32 on the host and moved by the network (MoveParameter).
//
//   Conv2d conv("layer1.0.conv1", /*in=*/64, /*out=*/64, /*kernel=*/3, /*stride=*/1, /*pad=*/1);
//   Tensor y = conv.Forward(x);                  // keeps x for the backward pass
//   Tensor dx = conv.Backward(dy, /*need_dx=*/true);   // writes conv.weight()->grad
//
// Forward keeps what Backward needs (the input, BN's saved statistics, pooling indices)
// until the next Forward. Backward overwrites the gradients of the module's parameters.
// Modules are used by one thread at a time. Parameter names follow torchvision's.
#pragma once

#include <string>
#include <vector>

#include "models/network.h"
#include "ops/ops.h"

namespace tally {

// Convolution without bias; weight [K, R, S, C] named "<name>.weight".
class Conv2d {
 public:
  Conv2d(const std::string& name, int64_t in_channels, int64_t out_channels, int kernel,
         int stride, int pad);
  // x may have more channels than the weight (zeros, ModelConfig::input_channels): the
  // weight is then padded with zero channels to match, and its gradient cropped back.
  Tensor Forward(const Tensor& x);
  // dy: the gradient of the output. Returns dx, or an undefined Tensor when !need_dx.
  Tensor Backward(const Tensor& dy, bool need_dx);
  void AppendParameters(std::vector<Parameter*>* out) { out->push_back(&weight_); }
  Parameter* weight() { return &weight_; }

 private:
  Parameter weight_;
  ConvParams params_;
  Tensor x_;
  Tensor padded_weight_, padded_grad_;  // when x has more channels than the weight
};

// Batch normalisation per channel: "<name>.weight" (gamma), ".bias" (beta), ".running_mean",
// ".running_var". In training, batch statistics are used and the running ones updated,
// unless use_global_stats, where the running statistics normalise in training too and stay
// fixed (MXNet's use_global_stats). Forward computes relu(BN(x) + z) when asked (z may be
// nullptr), one fused op.
class BatchNorm {
 public:
  BatchNorm(const std::string& name, int64_t channels, float eps, float momentum,
            bool use_global_stats);
  Tensor Forward(const Tensor& x, bool training, const Tensor* z = nullptr, bool relu = false);
  // REQUIRES: the last Forward had training = true. dz receives the gradient of that
  // Forward's z (REQUIRES: it had one).
  Tensor Backward(const Tensor& dy, Tensor* dz = nullptr);
  void AppendParameters(std::vector<Parameter*>* out);
  Parameter* gamma() { return &gamma_; }

 private:
  Parameter gamma_, beta_, running_mean_, running_var_;
  BatchNormParams params_;
  bool use_global_stats_;
  bool batch_stats_used_ = false;  // how the last Forward normalised
  bool relu_ = false, had_z_ = false;
  Tensor x_, y_, save_mean_, save_inv_std_;
};

class MaxPool {
 public:
  MaxPool(int kernel, int stride, int pad);
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);

 private:
  PoolParams params_;
  Shape x_shape_;
  Tensor argmax_;
};

// [N, H, W, C] -> [N, C].
class GlobalAvgPool {
 public:
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);

 private:
  Shape x_shape_;
};

// y = x * w^T + b: "<name>.weight" [out, in] and "<name>.bias" [out].
class Linear {
 public:
  Linear(const std::string& name, int64_t in_features, int64_t out_features);
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);
  void AppendParameters(std::vector<Parameter*>* out);

 private:
  Parameter weight_, bias_;
  Tensor x_;
};

// A trainable parameter with a zeroed value and gradient, fp32 on the host; an auxiliary
// state has no grad.
Parameter MakeParameter(const std::string& name, const Shape& shape, bool trainable,
                        bool keep_f32 = false);
// Moves p to `device`, in `dtype` unless p->keep_f32; the gradient is zeroed there.
void MoveParameter(Parameter* p, Device device, DType dtype);

}  // namespace tally
