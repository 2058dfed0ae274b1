#include "models/layer_costs.h"

#include <memory>

namespace tally {
namespace {

int64_t ConvOut(int64_t in, int kernel, int stride, int pad) { return (in + 2 * pad - kernel) / stride + 1; }

// "layer2.0.conv1.weight" -> "layer2.0"; the stem's and the classifier's parameters -> "stem", "fc".
std::string GroupOf(const std::string& name) {
  if (name.rfind("layer", 0) != 0) return name.rfind("fc.", 0) == 0 ? "fc" : "stem";
  const size_t stage_end = name.find('.');
  return name.substr(0, name.find('.', stage_end + 1));
}

// Walks the convolutions in forward order, keeping the resolution they run at: the stem
// (7x7 stride 2 and a 3x3 stride-2 max pool, or one 3x3 for CIFAR-style nets); then each
// stage's first block halves it (not the first stage's), in its 3x3 convolution for a
// bottleneck (ResNet v1b) or its first one for a basic block, and in its downsample.
class Resolution {
 public:
  Resolution(int64_t h, int64_t w) : h_(h), w_(w) {}
  // Output pixels of the convolution `name` with weight [K, R, S, C].
  double ConvPixels(const std::string& name, const Shape& weight, bool bottleneck_block) {
    const int kernel = static_cast<int>(weight[1]);
    if (name == "conv1.weight") {
      const bool imagenet = kernel == 7;
      h_ = ConvOut(h_, kernel, imagenet ? 2 : 1, kernel / 2);
      w_ = ConvOut(w_, kernel, imagenet ? 2 : 1, kernel / 2);
      const double pixels = static_cast<double>(h_ * w_);
      if (imagenet) h_ = ConvOut(h_, 3, 2, 1), w_ = ConvOut(w_, 3, 2, 1);  // the max pool
      return pixels;
    }
    const std::string group = GroupOf(name);
    const bool first_of_later_stage = group.compare(group.size() - 2, 2, ".0") == 0 && group != "layer1.0";
    const std::string conv = name.substr(group.size() + 1);
    const bool strided_conv = bottleneck_block ? conv == "conv2.weight" : conv == "conv1.weight";
    const bool downsample = conv == "downsample.0.weight";
    if (first_of_later_stage && (strided_conv || downsample)) {
      const int64_t h = ConvOut(block_h_, kernel, 2, kernel / 2), w = ConvOut(block_w_, kernel, 2, kernel / 2);
      if (strided_conv) h_ = h, w_ = w;
      return static_cast<double>(h * w);
    }
    return static_cast<double>(h_ * w_);
  }
  // A block begins: its input's resolution, for the downsample.
  void BeginBlock() { block_h_ = h_, block_w_ = w_; }

 private:
  int64_t h_, w_, block_h_ = 0, block_w_ = 0;
};

}  // namespace

Status LayerGroups(const ModelConfig& cfg, std::vector<LayerGroup>* out) {
  ModelConfig host = cfg;
  host.device = Device::Cpu();
  host.dtype = DType::kF32;
  std::unique_ptr<Network> net;
  TALLY_RETURN_IF_ERROR(CreateNetwork(host, &net));
  const std::vector<Parameter*>& params = net->Parameters();
  out->clear();
  Resolution res(cfg.image_shape[1], cfg.image_shape[2]);
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = *params[i];
    const std::string group = GroupOf(p.name);
    if (out->empty() || out->back().name != group) {
      out->push_back(LayerGroup{group, {}, {}, 0});
      res.BeginBlock();
    }
    LayerGroup& g = out->back();
    if (!p.trainable) continue;
    g.keys.push_back(static_cast<int>(i));
    g.numel.push_back(p.value.numel());
    const Shape& s = p.value.shape();
    if (s.size() == 4) {  // a convolution [K, R, S, C]
      bool bottleneck = false;
      for (const Parameter* q : params) bottleneck |= q->name == group + ".conv3.weight";
      g.flops += 2.0 * static_cast<double>(p.value.numel()) * res.ConvPixels(p.name, s, bottleneck);
    } else if (p.name == "fc.weight") {
      g.flops += 2.0 * static_cast<double>(p.value.numel());
    }
  }
  return Status::Ok();
}

}  // namespace tally
