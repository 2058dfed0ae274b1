#include "models/layers.h"

namespace tally {

Parameter MakeParameter(const std::string& name, const Shape& shape, bool trainable,
                        bool keep_f32) {
  Parameter p;
  p.name = name;
  p.value = Tensor::Zeros(shape, DType::kF32);
  if (trainable) p.grad = Tensor::Zeros(shape, DType::kF32);
  p.trainable = trainable;
  p.keep_f32 = keep_f32;
  return p;
}

void MoveParameter(Parameter* p, Device device, DType dtype) {
  const DType t = p->keep_f32 ? DType::kF32 : dtype;
  if (p->value.device() == device && p->value.dtype() == t) return;
  Tensor moved = Tensor::Empty(p->value.shape(), t, device);
  moved.CopyFrom(p->value);
  p->value = moved;
  if (p->grad.defined()) p->grad = Tensor::Zeros(p->value.shape(), t, device);
}

Conv2d::Conv2d(const std::string& name, int64_t in_channels, int64_t out_channels, int kernel,
               int stride, int pad)
    : weight_(MakeParameter(name + ".weight", {out_channels, kernel, kernel, in_channels}, true)) {
  params_.stride_h = params_.stride_w = stride;
  params_.pad_h = params_.pad_w = pad;
}

Tensor Conv2d::Forward(const Tensor& x) {
  x_ = x;
  Tensor w = weight_.value;
  if (x.ndim() == 4 && x.dim(3) > w.dim(3)) {
    Shape padded = w.shape();
    padded[3] = x.dim(3);
    if (!padded_weight_.defined() || padded_weight_.shape() != padded ||
        padded_weight_.dtype() != w.dtype() || padded_weight_.device() != w.device()) {
      padded_weight_ = Tensor::Empty(padded, w.dtype(), w.device());
      padded_grad_ = Tensor::Empty(padded, w.dtype(), w.device());
    }
    PadLastDim(w, &padded_weight_);
    w = padded_weight_;
  }
  Tensor y = Tensor::Empty(Conv2dOutputShape(x.shape(), w.shape(), params_), x.dtype(),
                           x.device());
  Conv2dForward(x, w, params_, &y);
  return y;
}

Tensor Conv2d::Backward(const Tensor& dy, bool need_dx) {
  CHECK(x_.defined()) << weight_.name << ": Backward without Forward";
  const bool padded = x_.dim(3) > weight_.value.dim(3);
  if (padded) {
    Conv2dBackwardFilter(x_, dy, params_, &padded_grad_);
    CropLastDim(padded_grad_, &weight_.grad);
  } else {
    Conv2dBackwardFilter(x_, dy, params_, &weight_.grad);
  }
  Tensor dx;
  if (need_dx) {
    dx = Tensor::Empty(x_.shape(), x_.dtype(), x_.device());
    Conv2dBackwardData(dy, padded ? padded_weight_ : weight_.value, params_, &dx);
  }
  return dx;
}

BatchNorm::BatchNorm(const std::string& name, int64_t channels, float eps, float momentum,
                     bool use_global_stats)
    : gamma_(MakeParameter(name + ".weight", {channels}, true, /*keep_f32=*/true)),
      beta_(MakeParameter(name + ".bias", {channels}, true, /*keep_f32=*/true)),
      running_mean_(MakeParameter(name + ".running_mean", {channels}, false, /*keep_f32=*/true)),
      running_var_(MakeParameter(name + ".running_var", {channels}, false, /*keep_f32=*/true)),
      use_global_stats_(use_global_stats) {
  params_.eps = eps;
  params_.momentum = momentum;
}

void BatchNorm::AppendParameters(std::vector<Parameter*>* out) {
  out->insert(out->end(), {&gamma_, &beta_, &running_mean_, &running_var_});
}

Tensor BatchNorm::Forward(const Tensor& x, bool training, const Tensor* z, bool relu) {
  Tensor y = Tensor::Empty(x.shape(), x.dtype(), x.device());
  batch_stats_used_ = training && !use_global_stats_;
  if (batch_stats_used_) {
    int64_t c = gamma_.value.numel();
    if (!save_mean_.defined() || save_mean_.device() != x.device()) {
      save_mean_ = Tensor::Empty({c}, DType::kF32, x.device());
      save_inv_std_ = Tensor::Empty({c}, DType::kF32, x.device());
    }
    BatchNormAddReluForwardTraining(x, z, gamma_.value, beta_.value, params_, relu,
                                    &running_mean_.value, &running_var_.value, &y, &save_mean_,
                                    &save_inv_std_);
  } else {
    BatchNormAddReluForwardInference(x, z, gamma_.value, beta_.value, running_mean_.value,
                                     running_var_.value, params_, relu, &y);
  }
  relu_ = relu;
  had_z_ = z != nullptr;
  x_ = training ? x : Tensor();
  y_ = training && relu ? y : Tensor();
  return y;
}

Tensor BatchNorm::Backward(const Tensor& dy, Tensor* dz) {
  CHECK(x_.defined()) << gamma_.name << ": Backward needs a training Forward first";
  CHECK(dz == nullptr || had_z_) << gamma_.name << ": dz asked for, but Forward had no z";
  Tensor dx = Tensor::Empty(x_.shape(), x_.dtype(), x_.device());
  if (batch_stats_used_) {
    BatchNormAddReluBackward(x_, y_, dy, gamma_.value, save_mean_, save_inv_std_, relu_, &dx,
                             dz, &gamma_.grad, &beta_.grad);
    return dx;
  }
  // Statistics held fixed: the ReLU's mask first, then the affine map's backward.
  Tensor masked = dy;
  if (relu_) {
    masked = Tensor::Empty(dy.shape(), dy.dtype(), dy.device());
    ReluBackward(y_, dy, &masked);
  }
  if (dz != nullptr) dz->CopyFrom(masked);
  BatchNormBackwardInference(x_, masked, gamma_.value, running_mean_.value, running_var_.value,
                             params_, &dx, &gamma_.grad, &beta_.grad);
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
  Tensor y = Tensor::Empty(out, x.dtype(), x.device());
  argmax_ = Tensor::Empty(out, DType::kI32, x.device());
  MaxPoolForward(x, params_, &y, &argmax_);
  return y;
}

Tensor MaxPool::Backward(const Tensor& dy) {
  CHECK(argmax_.defined()) << "max pool: Backward without Forward";
  Tensor dx = Tensor::Empty(x_shape_, dy.dtype(), dy.device());
  MaxPoolBackward(dy, argmax_, &dx);
  return dx;
}

Tensor GlobalAvgPool::Forward(const Tensor& x) {
  CHECK_EQ(x.ndim(), 4) << "global pool input " << x.ToString();
  x_shape_ = x.shape();
  Tensor y = Tensor::Empty({x.dim(0), x.dim(3)}, x.dtype(), x.device());
  GlobalAvgPoolForward(x, &y);
  return y;
}

Tensor GlobalAvgPool::Backward(const Tensor& dy) {
  CHECK(!x_shape_.empty()) << "global pool: Backward without Forward";
  Tensor dx = Tensor::Empty(x_shape_, dy.dtype(), dy.device());
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
  Tensor y = Tensor::Empty({x.dim(0), weight_.value.dim(0)}, x.dtype(), x.device());
  LinearForward(x, weight_.value, &bias_.value, &y);
  return y;
}

Tensor Linear::Backward(const Tensor& dy) {
  CHECK(x_.defined()) << weight_.name << ": Backward without Forward";
  Tensor dx = Tensor::Empty(x_.shape(), x_.dtype(), x_.device());
  LinearBackward(x_, weight_.value, dy, &dx, &weight_.grad, &bias_.grad);
  return dx;
}

}  // namespace tally
