#include "models/layers.h"

namespace tally {

Parameter MakeParameter(const std::string& name, const Shape& shape, bool trainable) {
  Parameter p;
  p.name = name;
  p.value = Tensor::Zeros(shape, DType::kF32);
  if (trainable) p.grad = Tensor::Zeros(shape, DType::kF32);
  p.trainable = trainable;
  return p;
}

Conv2d::Conv2d(const std::string& name, int64_t in_channels, int64_t out_channels, int kernel,
               int stride, int pad)
    : weight_(MakeParameter(name + ".weight", {out_channels, kernel, kernel, in_channels}, true)) {
  params_.stride_h = params_.stride_w = stride;
  params_.pad_h = params_.pad_w = pad;
}

Tensor Conv2d::Forward(const Tensor& x) {
  x_ = x;
  Tensor y = Tensor::Empty(Conv2dOutputShape(x.shape(), weight_.value.shape(), params_),
                           DType::kF32);
  Conv2dForward(x, weight_.value, params_, &y);
  return y;
}

Tensor Conv2d::Backward(const Tensor& dy, bool need_dx) {
  CHECK(x_.defined()) << weight_.name << ": Backward without Forward";
  Conv2dBackwardFilter(x_, dy, params_, &weight_.grad);
  Tensor dx;
  if (need_dx) {
    dx = Tensor::Empty(x_.shape(), DType::kF32);
    Conv2dBackwardData(dy, weight_.value, params_, &dx);
  }
  return dx;
}

BatchNorm::BatchNorm(const std::string& name, int64_t channels, float eps, float momentum,
                     bool use_global_stats)
    : gamma_(MakeParameter(name + ".weight", {channels}, true)),
      beta_(MakeParameter(name + ".bias", {channels}, true)),
      running_mean_(MakeParameter(name + ".running_mean", {channels}, false)),
      running_var_(MakeParameter(name + ".running_var", {channels}, false)),
      use_global_stats_(use_global_stats) {
  params_.eps = eps;
  params_.momentum = momentum;
}

void BatchNorm::AppendParameters(std::vector<Parameter*>* out) {
  out->insert(out->end(), {&gamma_, &beta_, &running_mean_, &running_var_});
}

Tensor BatchNorm::Forward(const Tensor& x, bool training) {
  Tensor y = Tensor::Empty(x.shape(), DType::kF32);
  batch_stats_used_ = training && !use_global_stats_;
  if (batch_stats_used_) {
    int64_t c = gamma_.value.numel();
    if (!save_mean_.defined()) {
      save_mean_ = Tensor::Empty({c}, DType::kF32);
      save_inv_std_ = Tensor::Empty({c}, DType::kF32);
    }
    BatchNormForwardTraining(x, gamma_.value, beta_.value, params_, &running_mean_.value,
                             &running_var_.value, &y, &save_mean_, &save_inv_std_);
  } else {
    BatchNormForwardInference(x, gamma_.value, beta_.value, running_mean_.value,
                              running_var_.value, params_, &y);
  }
  x_ = training ? x : Tensor();
  return y;
}

Tensor BatchNorm::Backward(const Tensor& dy) {
  CHECK(x_.defined()) << gamma_.name << ": Backward needs a training Forward first";
  Tensor dx = Tensor::Empty(x_.shape(), DType::kF32);
  if (batch_stats_used_) {
    BatchNormBackward(x_, dy, gamma_.value, save_mean_, save_inv_std_, &dx, &gamma_.grad,
                      &beta_.grad);
  } else {
    BatchNormBackwardInference(x_, dy, gamma_.value, running_mean_.value, running_var_.value,
                               params_, &dx, &gamma_.grad, &beta_.grad);
  }
  return dx;
}

MaxPool::MaxPool(int kernel, int stride, int pad) {
  params_.kernel_h = params_.kernel_w = kernel;
  params_.stride_h = params_.stride_w = stride;
  params_.pad_h = params_.pad_w = pad;
}

Tensor MaxPool::Forward(const Tensor& x) {
  x_shape_ = x.shape();
  Shape out = PoolOutputShape(x.shape(), params_);
  Tensor y = Tensor::Empty(out, DType::kF32);
  argmax_ = Tensor::Empty(out, DType::kI32);
  MaxPoolForward(x, params_, &y, &argmax_);
  return y;
}

Tensor MaxPool::Backward(const Tensor& dy) {
  CHECK(argmax_.defined()) << "max pool: Backward without Forward";
  Tensor dx = Tensor::Empty(x_shape_, DType::kF32);
  MaxPoolBackward(dy, argmax_, &dx);
  return dx;
}

Tensor GlobalAvgPool::Forward(const Tensor& x) {
  CHECK_EQ(x.ndim(), 4) << "global pool input " << x.ToString();
  x_shape_ = x.shape();
  Tensor y = Tensor::Empty({x.dim(0), x.dim(3)}, DType::kF32);
  GlobalAvgPoolForward(x, &y);
  return y;
}

Tensor GlobalAvgPool::Backward(const Tensor& dy) {
  CHECK(!x_shape_.empty()) << "global pool: Backward without Forward";
  Tensor dx = Tensor::Empty(x_shape_, DType::kF32);
  GlobalAvgPoolBackward(dy, &dx);
  return dx;
}

Linear::Linear(const std::string& name, int64_t in_features, int64_t out_features)
    : weight_(MakeParameter(name + ".weight", {out_features, in_features}, true)),
      bias_(MakeParameter(name + ".bias", {out_features}, true)) {}

void Linear::AppendParameters(std::vector<Parameter*>* out) {
  out->insert(out->end(), {&weight_, &bias_});
}

Tensor Linear::Forward(const Tensor& x) {
  x_ = x;
  Tensor y = Tensor::Empty({x.dim(0), weight_.value.dim(0)}, DType::kF32);
  LinearForward(x, weight_.value, &bias_.value, &y);
  return y;
}

Tensor Linear::Backward(const Tensor& dy) {
  CHECK(x_.defined()) << weight_.name << ": Backward without Forward";
  Tensor dx = Tensor::Empty(x_.shape(), DType::kF32);
  LinearBackward(x_, weight_.value, dy, &dx, &weight_.grad, &bias_.grad);
  return dx;
}

}  // namespace tally
