// The ResNet family: torchvision's ResNet v1b (stride in the 3x3 convolution of the
// bottleneck; "resnet-v1": in its first 1x1) for depths 18/34/50/101/152, and the CIFAR-style ResNet 6n+2 of He et al.
// (3x3 stem, three stages of basic blocks with 16/32/64 channels, 1x1 projection shortcuts).
#include <memory>
#include <sstream>
#include <utility>

#include "models/init.h"
#include "models/layers.h"
#include "models/network.h"
#include "ops/device.h"

namespace tally {
namespace {

int64_t InputChannels(const ModelConfig& cfg) {
  return cfg.input_channels > 0 ? cfg.input_channels : cfg.image_shape[0];
}

// A basic block (two 3x3 convolutions) or a bottleneck (1x1, 3x3 with the stride, 1x1 with
// 4x the channels), plus a 1x1 projection shortcut with BN when the shape changes. Every
// BN but the last is followed by a ReLU; the last ReLU comes after the addition.
class ResidualBlock {
 public:
  ResidualBlock(const std::string& prefix, int64_t in, int64_t planes, int stride,
                bool bottleneck, const ModelConfig& cfg) {
    int64_t out = bottleneck ? planes * 4 : planes;
    auto add = [&](int64_t cin, int64_t cout, int kernel, int s) {
      std::string idx = std::to_string(convs_.size() + 1);
      convs_.push_back(std::make_unique<Conv2d>(prefix + ".conv" + idx, cin, cout, kernel, s,
                                                kernel / 2));
      bns_.push_back(std::make_unique<BatchNorm>(prefix + ".bn" + idx, cout, cfg.bn_eps,
                                                 cfg.bn_momentum, cfg.bn_use_global_stats));
    };
    if (bottleneck) {
      const bool v1 = StrideIn1x1(cfg);
      add(in, planes, 1, v1 ? stride : 1);
      add(planes, planes, 3, v1 ? 1 : stride);
      add(planes, out, 1, 1);
    } else {
      add(in, planes, 3, stride);
      add(planes, planes, 3, 1);
    }
    if (stride != 1 || in != out) {
      down_conv_ = std::make_unique<Conv2d>(prefix + ".downsample.0", in, out, 1, stride, 0);
      down_bn_ = std::make_unique<BatchNorm>(prefix + ".downsample.1", out, cfg.bn_eps,
                                             cfg.bn_momentum, cfg.bn_use_global_stats);
    }
  }

  void AppendParameters(std::vector<Parameter*>* out) {
    for (size_t i = 0; i < convs_.size(); ++i) {
      convs_[i]->AppendParameters(out);
      bns_[i]->AppendParameters(out);
    }
    if (down_conv_) {
      down_conv_->AppendParameters(out);
      down_bn_->AppendParameters(out);
    }
  }

  Parameter* last_gamma() { return bns_.back()->gamma(); }

  // Every BN is fused with what follows it: the ReLU inside the block, and the shortcut's
  // addition and the final ReLU at its end.
  Tensor Forward(const Tensor& x, bool training) {
    Tensor shortcut = down_conv_ ? down_bn_->Forward(down_conv_->Forward(x), training) : x;
    Tensor h = x;
    for (size_t i = 0; i < convs_.size(); ++i) {
      const bool last = i + 1 == convs_.size();
      h = bns_[i]->Forward(convs_[i]->Forward(h), training, last ? &shortcut : nullptr,
                           /*relu=*/true);
    }
    return h;
  }

  // The gradient reaching the input is the sum of the main path's and the shortcut's.
  Tensor Backward(const Tensor& dy) {
    Tensor d = Tensor::Empty(dy.shape(), dy.dtype(), dy.device());  // of the shortcut's output
    Tensor dmain = convs_.back()->Backward(bns_.back()->Backward(dy, &d), /*need_dx=*/true);
    for (size_t i = convs_.size() - 1; i-- > 0;) {
      dmain = convs_[i]->Backward(bns_[i]->Backward(dmain), /*need_dx=*/true);
    }
    Tensor dshort = down_conv_ ? down_conv_->Backward(down_bn_->Backward(d), true) : d;
    Add(dmain, dshort, &dmain);
    return dmain;
  }

 private:
  std::vector<std::unique_ptr<Conv2d>> convs_;
  std::vector<std::unique_ptr<BatchNorm>> bns_;
  std::unique_ptr<Conv2d> down_conv_;
  std::unique_ptr<BatchNorm> down_bn_;
};

class ResNet : public Network {
 public:
  ResNet(const ModelConfig& cfg, const ResNetDepth& depth) : cfg_(cfg) {
    int64_t channels = cfg.image_shape[0];
    int64_t width = depth.imagenet ? 64 : 16;
    conv1_ = depth.imagenet ? std::make_unique<Conv2d>("conv1", channels, width, 7, 2, 3)
                            : std::make_unique<Conv2d>("conv1", channels, width, 3, 1, 1);
    bn1_ = std::make_unique<BatchNorm>("bn1", width, cfg.bn_eps, cfg.bn_momentum,
                                       cfg.bn_use_global_stats);
    if (depth.imagenet) maxpool_ = std::make_unique<MaxPool>(3, 2, 1);
    int64_t in = width;
    for (size_t stage = 0; stage < depth.blocks.size(); ++stage) {
      int64_t planes = width << stage;
      for (int b = 0; b < depth.blocks[stage]; ++b) {
        std::string prefix = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
        int stride = (stage > 0 && b == 0) ? 2 : 1;
        blocks_.push_back(std::make_unique<ResidualBlock>(prefix, in, planes, stride,
                                                          depth.bottleneck, cfg));
        in = depth.bottleneck ? planes * 4 : planes;
      }
    }
    fc_ = std::make_unique<Linear>("fc", in, cfg.num_classes);

    conv1_->AppendParameters(&params_);
    bn1_->AppendParameters(&params_);
    stem_params_ = {0, params_.size()};
    for (auto& b : blocks_) {
      size_t first = params_.size();
      b->AppendParameters(&params_);
      block_params_.push_back({first, params_.size()});
    }
    fc_params_ = {params_.size(), 0};
    fc_->AppendParameters(&params_);
    fc_params_.second = params_.size();
  }

  Status Initialize() {
    TALLY_RETURN_IF_ERROR(InitializeParameters(cfg_.initializer, cfg_.seed, params_));
    if (cfg_.zero_last_gamma) {
      for (auto& b : blocks_) b->last_gamma()->value.SetZero();
    }
    for (Parameter* p : params_) MoveParameter(p, cfg_.device, cfg_.dtype);
    return Status::Ok();
  }

  Tensor Forward(const Tensor& x, bool training) override {
    CHECK_EQ(x.ndim(), 4) << "Forward takes NHWC images, got " << x.ToString();
    CHECK_EQ(x.dim(3), InputChannels(cfg_)) << "image channels of " << x.ToString();
    CHECK(x.dtype() == cfg_.dtype && x.device() == cfg_.device)
        << "images " << x.ToString() << " for a " << DTypeName(cfg_.dtype) << " model on "
        << cfg_.device.ToString();
    trained_ = training;
    Needed(stem_params_);
    Tensor h = bn1_->Forward(conv1_->Forward(x), training, nullptr, /*relu=*/true);
    if (maxpool_) h = maxpool_->Forward(h);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Needed(block_params_[i]);
      h = blocks_[i]->Forward(h, training);
    }
    h = pool_.Forward(h);
    Needed(fc_params_);
    return fc_->Forward(h);
  }

  void Backward(const Tensor& dlogits) override {
    CHECK(trained_) << "Backward needs a Forward with training = true";
    Tensor d = pool_.Backward(fc_->Backward(dlogits));
    GradientsReady(fc_params_);
    for (size_t i = blocks_.size(); i-- > 0;) {
      d = blocks_[i]->Backward(d);
      GradientsReady(block_params_[i]);
    }
    if (maxpool_) d = maxpool_->Backward(d);
    conv1_->Backward(bn1_->Backward(d), /*need_dx=*/false);
    GradientsReady(stem_params_);
  }

  void SetGradientReadyCallback(GradientReadyFn fn) override { grad_ready_ = std::move(fn); }
  void SetParameterNeededCallback(ParameterNeededFn fn) override { needed_ = std::move(fn); }

  const std::vector<Parameter*>& Parameters() override { return params_; }
  const ModelConfig& config() const override { return cfg_; }

 private:
  ModelConfig cfg_;
  std::unique_ptr<Conv2d> conv1_;
  std::unique_ptr<BatchNorm> bn1_;
  std::unique_ptr<MaxPool> maxpool_;  // ImageNet stem only
  std::vector<std::unique_ptr<ResidualBlock>> blocks_;
  GlobalAvgPool pool_;
  std::unique_ptr<Linear> fc_;
  // Announces a module group's gradients, [first, second) of params_, in backward order.
  void GradientsReady(std::pair<size_t, size_t> range) {
    if (!grad_ready_) return;
    for (size_t i = range.second; i-- > range.first;) {
      if (params_[i]->trainable) grad_ready_(static_cast<int>(i));
    }
  }

  // Announces that a module group's parameters are about to be read, in forward order.
  void Needed(std::pair<size_t, size_t> range) {
    if (!needed_) return;
    for (size_t i = range.first; i < range.second; ++i) {
      if (params_[i]->trainable) needed_(static_cast<int>(i));
    }
  }

  std::vector<Parameter*> params_;
  std::pair<size_t, size_t> stem_params_, fc_params_;  // [first, last) in params_
  std::vector<std::pair<size_t, size_t>> block_params_;
  GradientReadyFn grad_ready_;
  ParameterNeededFn needed_;
  bool trained_ = false;
};

std::string ValidDepths() {
  return "18, 34, 50, 101, 152 (ImageNet-style) or 6n+2 such as 20, 32, 44, 56, 110 "
         "(CIFAR-style)";
}

}  // namespace

bool LookupResNetDepth(int layers, ResNetDepth* d) {
  switch (layers) {
    case 18: *d = {true, false, {2, 2, 2, 2}}; return true;
    case 34: *d = {true, false, {3, 4, 6, 3}}; return true;
    case 50: *d = {true, true, {3, 4, 6, 3}}; return true;
    case 101: *d = {true, true, {3, 4, 23, 3}}; return true;
    case 152: *d = {true, true, {3, 8, 36, 3}}; return true;
  }
  if (layers >= 8 && (layers - 2) % 6 == 0) {
    const int n = (layers - 2) / 6;
    *d = {false, false, {n, n, n}};
    return true;
  }
  return false;
}

Status CreateNetwork(const ModelConfig& cfg, std::unique_ptr<Network>* out) {
  if (cfg.network != "resnet" && cfg.network != "resnet-v1") {
    return Status::InvalidArgument("--network: unknown network '" + cfg.network +
                                   "' (resnet, or resnet-v1 with a bottleneck's stride in its "
                                   "first 1x1 convolution)");
  }
  ResNetDepth depth;
  if (!LookupResNetDepth(cfg.num_layers, &depth)) {
    return Status::InvalidArgument("--num-layers: resnet has no depth " +
                                   std::to_string(cfg.num_layers) + "; valid depths are " +
                                   ValidDepths());
  }
  if (cfg.num_classes < 1) {
    return Status::InvalidArgument("--num-classes: must be at least 1, got " +
                                   std::to_string(cfg.num_classes));
  }
  // The total stride of the network; a smaller image would leave no pixels to pool.
  int64_t min_size = depth.imagenet ? 32 : 4;
  const Shape& s = cfg.image_shape;
  if (s.size() != 3 || (s[0] != 3 && s[0] != 1) || s[1] < min_size || s[2] < min_size ||
      s[1] > 65536 || s[2] > 65536) {
    std::ostringstream msg;
    msg << "--image-shape: expected C,H,W with C = 3 (or 1 for grayscale) and H, W at least "
        << min_size << " for resnet-" << cfg.num_layers << ", got " << ShapeString(s);
    return Status::InvalidArgument(msg.str());
  }
  TALLY_RETURN_IF_ERROR(CheckDevice(cfg.device));
  if (cfg.dtype != DType::kF32 && (cfg.dtype != DType::kF16 && cfg.dtype != DType::kBF16)) {
    return Status::InvalidArgument(std::string("--dtype: a network computes in float32, float16 "
                                               "or bfloat16, not ") + DTypeName(cfg.dtype));
  }
  if (cfg.dtype != DType::kF32 && cfg.device.is_cpu()) {
    return Status::InvalidArgument(std::string("--dtype ") + DTypeName(cfg.dtype) +
                                   " needs a GPU (--gpus); CPU workers compute in float32");
  }
  if (cfg.input_channels != 0 && cfg.input_channels < s[0]) {
    return Status::InvalidArgument("input channels " + std::to_string(cfg.input_channels) +
                                   " are fewer than the image's " + std::to_string(s[0]));
  }
  auto net = std::make_unique<ResNet>(cfg, depth);
  TALLY_RETURN_IF_ERROR(net->Initialize());
  *out = std::move(net);
  return Status::Ok();
}

}  // namespace tally
