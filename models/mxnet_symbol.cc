#include "models/mxnet_symbol.h"

#include <array>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "models/mxnet_names.h"

namespace tally {
namespace {

// MXNet 1.9.1: a graph that says so is loaded as it is, without the upgrade passes for
// older JSON.
constexpr int kMxnetVersion = 10901;

struct Node {
  std::string op, name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<std::array<int, 3>> inputs;  // node, output, version (1: an auxiliary state)
  int outputs = 1;
};

std::string Pair(int64_t a, int64_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

std::string Float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }  // names are plain ASCII

class GraphBuilder {
 public:
  GraphBuilder(const ModelConfig& cfg, const std::vector<NamedTensor>& params) : cfg_(cfg) {
    for (const NamedTensor& p : params) shapes_[p.name] = p.tensor.shape();
  }

  Status Build(std::string* json) {
    int h = Add({"null", "data", {}, {}});
    const Shape* stem = Find("conv1.weight");
    if (stem == nullptr) return Status::InvalidArgument("no conv1.weight among the parameters");
    const bool imagenet = (*stem)[1] == 7;
    h = ConvBn("conv0", "bn0", "conv1", "bn1", h, imagenet ? 2 : 1);
    h = Relu("relu0", h);
    if (imagenet) {
      h = Add({"Pooling", "pooling0", {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"pool_type", "max"},
                                       {"stride", "(2, 2)"}}, {{h, 0, 0}}});
    }
    for (int stage = 1; Find(Layer(stage, 0) + ".conv1.weight") != nullptr; ++stage) {
      for (int b = 0; Find(Layer(stage, b) + ".conv1.weight") != nullptr; ++b) {
        h = Unit(stage, b, h);
      }
    }
    h = Add({"Pooling", "pool1", {{"global_pool", "True"}, {"kernel", "(7, 7)"}, {"pool_type", "avg"}}, {{h, 0, 0}}});
    h = Add({"Flatten", "flatten0", {}, {{h, 0, 0}}});
    const int w = Var("fc.weight"), b = Var("fc.bias");
    h = Add({"FullyConnected", "fc1", {{"num_hidden", std::to_string(cfg_.num_classes)}},
             {{h, 0, 0}, {w, 0, 0}, {b, 0, 0}}});
    const int label = Add({"null", "softmax_label", {}, {}});
    h = Add({"SoftmaxOutput", "softmax", {}, {{h, 0, 0}, {label, 0, 0}}});
    if (!absent_.empty()) return Status::InvalidArgument("the graph needs parameter " + absent_ + ", not given");
    for (const auto& [name, shape] : shapes_) {
      if (!seen_.count(name)) return Status::InvalidArgument("parameter " + name + " has no place in the graph");
    }
    *json = Write(h);
    return Status::Ok();
  }

 private:
  static std::string Layer(int stage, int block) {
    return "layer" + std::to_string(stage) + "." + std::to_string(block);
  }

  const Shape* Find(const std::string& name) const {
    auto it = shapes_.find(name);
    return it == shapes_.end() ? nullptr : &it->second;
  }

  int Add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }

  // A variable for Tally's parameter `ours`, under its Module name.
  int Var(const std::string& ours) {
    seen_.insert(ours);
    if (!shapes_.count(ours) && absent_.empty()) absent_ = ours;
    std::string name = MxnetName(ours, MxnetScheme::kModule).substr(4);  // without arg:/aux:
    return Add({"null", name, {}, {}});
  }

  int ConvBn(const std::string& conv, const std::string& bn, const std::string& our_conv,
             const std::string& our_bn, int h, int stride) {
    const int weight = Var(our_conv + ".weight");
    const Shape w = shapes_.count(our_conv + ".weight") ? shapes_.at(our_conv + ".weight") : Shape{0, 1, 1, 0};  // [K, R, S, C]
    h = Add({"Convolution", conv, {{"kernel", Pair(w[1], w[2])}, {"no_bias", "True"}, {"num_filter", std::to_string(w[0])},
                                   {"pad", Pair(w[1] / 2, w[2] / 2)}, {"stride", Pair(stride, stride)}},
             {{h, 0, 0}, {weight, 0, 0}}});
    const int gamma = Var(our_bn + ".weight"), beta = Var(our_bn + ".bias");
    const int mean = Var(our_bn + ".running_mean"), var = Var(our_bn + ".running_var");
    Node n{"BatchNorm", bn, {{"eps", Float(cfg_.bn_eps)}, {"fix_gamma", "False"}, {"momentum", Float(cfg_.bn_momentum)}},
           {{h, 0, 0}, {gamma, 0, 0}, {beta, 0, 0}, {mean, 0, 1}, {var, 0, 1}}};
    n.outputs = 3;  // the output, and the batch mean and variance MXNet keeps hidden
    return Add(std::move(n));
  }

  int Relu(const std::string& name, int h) { return Add({"Activation", name, {{"act_type", "relu"}}, {{h, 0, 0}}}); }

  int Unit(int stage, int block, int in) {
    const std::string ours = Layer(stage, block);
    const std::string unit = "stage" + std::to_string(stage) + "_unit" + std::to_string(block + 1);
    const int stride = stage > 1 && block == 0 ? 2 : 1;
    const bool bottleneck = Find(ours + ".conv3.weight") != nullptr;
    const int convs = bottleneck ? 3 : 2;
    // Where the stride goes: the first convolution of a basic block or of a v1 bottleneck,
    // the second (3x3) of a v1b one.
    const int strided = bottleneck && !StrideIn1x1(cfg_) ? 2 : 1;
    int h = in;
    for (int k = 1; k <= convs; ++k) {
      const std::string K = std::to_string(k);
      h = ConvBn(unit + "_conv" + K, unit + "_bn" + K, ours + ".conv" + K, ours + ".bn" + K, h, k == strided ? stride : 1);
      if (k < convs) h = Relu(unit + "_relu" + K, h);
    }
    int shortcut = in;
    if (Find(ours + ".downsample.0.weight") != nullptr) {
      shortcut = ConvBn(unit + "_conv1sc", unit + "_sc", ours + ".downsample.0", ours + ".downsample.1", in, stride);
    }
    h = Add({"elemwise_add", "_plus" + std::to_string(plus_++), {}, {{h, 0, 0}, {shortcut, 0, 0}}});
    return Relu(unit + "_relu3", h);
  }

  std::string Write(int head) const {
    std::ostringstream o;
    o << "{\n  \"nodes\": [\n";
    std::vector<int> args, row_ptr = {0};
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];
      if (n.op == "null") args.push_back(static_cast<int>(i));
      row_ptr.push_back(row_ptr.back() + n.outputs);
      o << "    {\n      \"op\": " << Quote(n.op) << ",\n      \"name\": " << Quote(n.name) << ",\n";
      if (!n.attrs.empty()) {
        o << "      \"attrs\": {";
        for (size_t a = 0; a < n.attrs.size(); ++a) {
          o << (a ? ", " : "") << Quote(n.attrs[a].first) << ": " << Quote(n.attrs[a].second);
        }
        o << "},\n";
      }
      o << "      \"inputs\": [";
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        o << (k ? ", " : "") << "[" << n.inputs[k][0] << ", " << n.inputs[k][1] << ", " << n.inputs[k][2] << "]";
      }
      o << "]\n    }" << (i + 1 < nodes_.size() ? "," : "") << "\n";
    }
    auto list = [](const std::vector<int>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    o << "  ],\n  \"arg_nodes\": " << list(args) << ",\n  \"node_row_ptr\": " << list(row_ptr)
      << ",\n  \"heads\": [[" << head << ", 0, 0]],\n  \"attrs\": {\"mxnet_version\": [\"int\", " << kMxnetVersion
      << "]}\n}\n";
    return o.str();
  }

  const ModelConfig& cfg_;
  std::map<std::string, Shape> shapes_;
  std::set<std::string> seen_;  // the parameters given a variable
  std::string absent_;          // the first of them not among the parameters
  std::vector<Node> nodes_;
  int plus_ = 0;
};

}  // namespace

Status MxnetSymbolJson(const ModelConfig& cfg, const std::vector<NamedTensor>& params, std::string* json) {
  GraphBuilder g(cfg, params);
  return g.Build(json);
}

}  // namespace tally
