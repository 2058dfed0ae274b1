// The ONNX graph of a ResNet, built by walking the structure of models/resnet.cc, and its
// protobuf encoding. Tensor bytes go from the parameters straight to the file: only the
// graph's small messages are assembled in memory, so a ResNet-152 is not copied whole.
#include "models/onnx_export.h"

#include <climits>
#include <cstdio>
#include <fstream>
#include <utility>

#include "models/atomic_file.h"
#include "models/onnx_proto.h"

namespace tally {
namespace {

ProtoWriter IntAttr(const char* name, int64_t v) {
  ProtoWriter a;
  a.String(onnx::kAttrName, name);
  a.Varint(onnx::kAttrI, v);
  a.Varint(onnx::kAttrType, onnx::kAttrTypeInt);
  return a;
}

ProtoWriter IntsAttr(const char* name, const std::vector<int64_t>& v) {
  ProtoWriter a;
  a.String(onnx::kAttrName, name);
  for (int64_t x : v) a.Varint(onnx::kAttrInts, x);
  a.Varint(onnx::kAttrType, onnx::kAttrTypeInts);
  return a;
}

ProtoWriter FloatAttr(const char* name, float v) {
  ProtoWriter a;
  a.String(onnx::kAttrName, name);
  a.Float(onnx::kAttrF, v);
  a.Varint(onnx::kAttrType, onnx::kAttrTypeFloat);
  return a;
}

// A float32 graph input or output; a dimension of -1 is the symbolic batch size "N".
ProtoWriter TensorValueInfo(const std::string& name, const std::vector<int64_t>& dims) {
  ProtoWriter shape;
  for (int64_t d : dims) {
    ProtoWriter dim;
    if (d < 0) dim.String(onnx::kDimParam, "N");
    else dim.Varint(onnx::kDimValue, d);
    shape.Message(onnx::kShapeDim, dim);
  }
  ProtoWriter tensor_type;
  tensor_type.Varint(onnx::kTensorTypeElemType, onnx::kFloat);
  tensor_type.Message(onnx::kTensorTypeShape, shape);
  ProtoWriter type;
  type.Message(onnx::kTypeTensor, tensor_type);
  ProtoWriter info;
  info.String(onnx::kValueName, name);
  info.Message(onnx::kValueType, type);
  return info;
}

// A weight as ONNX stores it: the TensorProto's fields before raw_data, and the values that
// become raw_data (permuted and converted when the file is written).
struct Initializer {
  ProtoWriter header;  // dims, data_type, name
  Tensor value;        // Tally's: float32, convolutions [K, R, S, C]
  uint64_t data_bytes;
  uint64_t proto_bytes() const {
    return header.bytes().size() +
           ProtoWriter::LengthDelimitedSize(onnx::kTensorRawData, data_bytes);
  }
};

class GraphBuilder {
 public:
  GraphBuilder(const ModelConfig& cfg, const std::vector<NamedTensor>& params,
               const OnnxOptions& opt)
      : cfg_(cfg), params_(params), opt_(opt), used_(params.size(), false) {
    model_ = cfg.network + "-" + std::to_string(cfg.num_layers) + " with " +
             std::to_string(cfg.num_classes) + " classes";
  }

  // Adds every node and initializer; fails naming the first parameter that is missing,
  // repeated, misshapen or not the network's.
  Status Build(const ResNetDepth& depth);
  Status Write(const std::string& path) const;

 private:
  std::string Param(const std::string& name, const Shape& shape);
  void Node(const char* op, const std::vector<std::string>& inputs, const std::string& output,
            const std::vector<ProtoWriter>& attrs = {});
  std::string ConvBn(const std::string& conv, const std::string& bn, const std::string& x,
                     int64_t cin, int64_t cout, int kernel, int stride);
  std::string Block(const std::string& prefix, const std::string& x, int64_t in,
                    int64_t planes, int stride, bool bottleneck);
  void Fail(const std::string& msg) {
    if (status_.ok()) status_ = Status::InvalidArgument(msg);
  }
  uint64_t GraphBytes() const;
  void WriteGraph(std::ostream& f) const;
  ProtoWriter ModelTail() const;

  const ModelConfig& cfg_;
  const std::vector<NamedTensor>& params_;
  const OnnxOptions& opt_;
  std::string model_;      // "resnet-50 with 1000 classes", for messages
  std::vector<bool> used_;  // per params_
  Status status_;
  ProtoWriter nodes_;       // GraphProto.node fields
  std::vector<Initializer> initializers_;
};

// The value name a node reads `name` from: the initializer itself, or its Cast to float32.
std::string GraphBuilder::Param(const std::string& name, const Shape& shape) {
  size_t found = 0;
  while (found < params_.size() && params_[found].name != name) ++found;
  if (found == params_.size()) {
    Fail("tensor '" + name + "' is missing (a " + model_ + " has it)");
    return name;
  }
  used_[found] = true;
  const Tensor& t = params_[found].tensor;
  if (t.dtype() != DType::kF32 || !t.device().is_cpu() || t.shape() != shape) {
    Fail("tensor '" + name + "' is " + t.ToString() + "; a " + model_ + " has float32" +
         ShapeString(shape) + " on the host");
    return name;
  }
  const bool f16 = opt_.weight_dtype == DType::kF16;
  Initializer init{{}, t, static_cast<uint64_t>(t.numel()) * (f16 ? 2 : 4)};
  const Shape dims = shape.size() == 4 ? Shape{shape[0], shape[3], shape[1], shape[2]} : shape;
  for (int64_t d : dims) init.header.Varint(onnx::kTensorDims, d);
  init.header.Varint(onnx::kTensorDataType, f16 ? onnx::kFloat16 : onnx::kFloat);
  init.header.String(onnx::kTensorName, name);
  initializers_.push_back(std::move(init));
  if (!f16) return name;
  Node("Cast", {name}, name + ".float32", {IntAttr("to", onnx::kFloat)});
  return name + ".float32";
}

void GraphBuilder::Node(const char* op, const std::vector<std::string>& inputs,
                        const std::string& output, const std::vector<ProtoWriter>& attrs) {
  ProtoWriter n;
  for (const std::string& in : inputs) n.String(onnx::kNodeInput, in);
  n.String(onnx::kNodeOutput, output);
  n.String(onnx::kNodeName, output);  // every value has one producer, so names are unique
  n.String(onnx::kNodeOpType, op);
  for (const ProtoWriter& a : attrs) n.Message(onnx::kNodeAttribute, a);
  nodes_.Message(onnx::kGraphNode, n);
}

// A convolution (no bias, padding kernel / 2 as models/resnet.cc) and its inference-mode
// BatchNormalization; returns the normalised value's name, which is `bn`.
std::string GraphBuilder::ConvBn(const std::string& conv, const std::string& bn,
                                 const std::string& x, int64_t cin, int64_t cout, int kernel,
                                 int stride) {
  const int64_t pad = kernel / 2;
  const std::string w = Param(conv + ".weight", {cout, kernel, kernel, cin});
  Node("Conv", {x, w}, conv,
       {IntsAttr("kernel_shape", {kernel, kernel}), IntsAttr("strides", {stride, stride}),
        IntsAttr("pads", {pad, pad, pad, pad})});
  std::vector<std::string> inputs = {conv};
  for (const char* p : {".weight", ".bias", ".running_mean", ".running_var"}) {
    inputs.push_back(Param(bn + p, {cout}));
  }
  Node("BatchNormalization", inputs, bn, {FloatAttr("epsilon", cfg_.bn_eps)});
  return bn;
}

// models/resnet.cc's ResidualBlock; returns the name of the block's output.
std::string GraphBuilder::Block(const std::string& prefix, const std::string& x, int64_t in,
                                int64_t planes, int stride, bool bottleneck) {
  struct ConvShape { int64_t cin, cout; int kernel, stride; };
  const int64_t out = bottleneck ? planes * 4 : planes;
  const bool v1 = StrideIn1x1(cfg_);
  const std::vector<ConvShape> convs =
      bottleneck ? std::vector<ConvShape>{{in, planes, 1, v1 ? stride : 1},
                                          {planes, planes, 3, v1 ? 1 : stride},
                                          {planes, out, 1, 1}}
                 : std::vector<ConvShape>{{in, planes, 3, stride}, {planes, planes, 3, 1}};
  std::string h = x;
  for (size_t i = 0; i < convs.size(); ++i) {
    const std::string idx = std::to_string(i + 1);
    const ConvShape& c = convs[i];
    h = ConvBn(prefix + ".conv" + idx, prefix + ".bn" + idx, h, c.cin, c.cout, c.kernel,
               c.stride);
    if (i + 1 == convs.size()) break;
    Node("Relu", {h}, prefix + ".relu" + idx);
    h = prefix + ".relu" + idx;
  }
  std::string shortcut = x;
  if (stride != 1 || in != out) {
    shortcut = ConvBn(prefix + ".downsample.0", prefix + ".downsample.1", x, in, out, 1, stride);
  }
  Node("Add", {h, shortcut}, prefix + ".add");
  Node("Relu", {prefix + ".add"}, prefix + ".relu");
  return prefix + ".relu";
}

Status GraphBuilder::Build(const ResNetDepth& depth) {
  for (size_t i = 0; i < params_.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (params_[i].name == params_[j].name) {
        Fail("tensor '" + params_[i].name + "' is given twice");
      }
    }
  }
  const int64_t width = depth.imagenet ? 64 : 16;
  std::string h = ConvBn("conv1", "bn1", "data", cfg_.image_shape[0], width,
                         depth.imagenet ? 7 : 3, depth.imagenet ? 2 : 1);
  Node("Relu", {h}, "relu");
  h = "relu";
  if (depth.imagenet) {
    Node("MaxPool", {h}, "maxpool",
         {IntsAttr("kernel_shape", {3, 3}), IntsAttr("strides", {2, 2}),
          IntsAttr("pads", {1, 1, 1, 1})});
    h = "maxpool";
  }
  int64_t in = width;
  for (size_t stage = 0; stage < depth.blocks.size(); ++stage) {
    const int64_t planes = width << stage;
    for (int b = 0; b < depth.blocks[stage]; ++b) {
      const int stride = stage > 0 && b == 0 ? 2 : 1;
      h = Block("layer" + std::to_string(stage + 1) + "." + std::to_string(b), h, in, planes,
                stride, depth.bottleneck);
      in = depth.bottleneck ? planes * 4 : planes;
    }
  }
  Node("GlobalAveragePool", {h}, "avgpool");
  Node("Flatten", {"avgpool"}, "flatten", {IntAttr("axis", 1)});
  const std::string w = Param("fc.weight", {cfg_.num_classes, in});
  const std::string b = Param("fc.bias", {cfg_.num_classes});
  Node("Gemm", {"flatten", w, b}, "logits", {IntAttr("transB", 1)});
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!used_[i]) Fail("tensor '" + params_[i].name + "' is not a parameter of a " + model_);
  }
  return status_;
}

ProtoWriter GraphInputsAndOutputs(const ModelConfig& cfg) {
  ProtoWriter io;
  const Shape& s = cfg.image_shape;
  io.Message(onnx::kGraphInput, TensorValueInfo("data", {-1, s[0], s[1], s[2]}));
  io.Message(onnx::kGraphOutput, TensorValueInfo("logits", {-1, cfg.num_classes}));
  return io;
}

std::string GraphName(const ModelConfig& cfg) {
  return cfg.network + "-" + std::to_string(cfg.num_layers);
}

uint64_t GraphBuilder::GraphBytes() const {
  uint64_t n = nodes_.bytes().size() + GraphInputsAndOutputs(cfg_).bytes().size() +
               ProtoWriter::LengthDelimitedSize(onnx::kGraphName, GraphName(cfg_).size());
  for (const Initializer& init : initializers_) {
    n += ProtoWriter::LengthDelimitedSize(onnx::kGraphInitializer, init.proto_bytes());
  }
  return n;
}

// The GraphProto's fields, tensor data converted one tensor at a time.
void GraphBuilder::WriteGraph(std::ostream& f) const {
  f << nodes_.bytes();
  ProtoWriter name;
  name.String(onnx::kGraphName, GraphName(cfg_));
  f << name.bytes();
  for (const Initializer& init : initializers_) {
    ProtoWriter prefix;
    prefix.LengthPrefix(onnx::kGraphInitializer, init.proto_bytes());
    f << prefix.bytes() << init.header.bytes();
    ProtoWriter data;
    data.LengthPrefix(onnx::kTensorRawData, init.data_bytes);
    f << data.bytes();
    Tensor t = init.value.ndim() == 4 ? NhwcToNchw(init.value) : init.value;
    if (opt_.weight_dtype != DType::kF32) t = t.To(opt_.weight_dtype);
    CHECK_EQ(t.nbytes(), init.data_bytes) << t.ToString();
    f.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  }
  f << GraphInputsAndOutputs(cfg_).bytes();
}

// ModelProto's fields after the graph: the opset and the metadata.
ProtoWriter GraphBuilder::ModelTail() const {
  ProtoWriter tail, opset;
  opset.String(onnx::kOpsetDomain, "");
  opset.Varint(onnx::kOpsetVersion, opt_.opset);
  tail.Message(onnx::kModelOpsetImport, opset);
  const Shape& s = cfg_.image_shape;
  std::map<std::string, std::string> metadata = {
      {"network", cfg_.network},
      {"num_layers", std::to_string(cfg_.num_layers)},
      {"num_classes", std::to_string(cfg_.num_classes)},
      {"image_shape",
       std::to_string(s[0]) + "," + std::to_string(s[1]) + "," + std::to_string(s[2])}};
  metadata.insert(opt_.metadata.begin(), opt_.metadata.end());  // keys must stay distinct
  for (const auto& [key, value] : metadata) {
    ProtoWriter entry;
    entry.String(onnx::kEntryKey, key);
    entry.String(onnx::kEntryValue, value);
    tail.Message(onnx::kModelMetadataProps, entry);
  }
  return tail;
}

Status GraphBuilder::Write(const std::string& path) const {
  ProtoWriter head;
  head.Varint(onnx::kModelIrVersion, OnnxIrVersion(opt_.opset));
  head.String(onnx::kModelProducerName, "tally");
  const uint64_t graph_bytes = GraphBytes();
  const ProtoWriter tail = ModelTail();
  const uint64_t total = head.bytes().size() +
                         ProtoWriter::LengthDelimitedSize(onnx::kModelGraph, graph_bytes) +
                         tail.bytes().size();
  // Protobuf parsers refuse messages of 2 GiB or more; ONNX then needs external data files,
  // which this writer does not produce.
  if (total > static_cast<uint64_t>(INT32_MAX)) {
    return Status::InvalidArgument(path + ": the model would be " + std::to_string(total) +
                                   " bytes, over protobuf's 2 GiB limit (try --dtype float16)");
  }
  head.LengthPrefix(onnx::kModelGraph, graph_bytes);
  return WriteFileAtomically(path, [&](std::ostream& f) {
    f << head.bytes();
    WriteGraph(f);
    f << tail.bytes();
  });
}

}  // namespace

int OnnxIrVersion(int opset) {
  if (opset < kOnnxMinOpset || opset > kOnnxMaxOpset) return 0;
  if (opset == 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  return 10;
}

Status WriteOnnx(const std::string& path, const ModelConfig& cfg,
                 const std::vector<NamedTensor>& params, const OnnxOptions& opt) {
  if (cfg.network != "resnet" && cfg.network != "resnet-v1") {
    return Status::InvalidArgument("ONNX export: unknown network '" + cfg.network + "'");
  }
  ResNetDepth depth;
  if (!LookupResNetDepth(cfg.num_layers, &depth)) {
    return Status::InvalidArgument("ONNX export: resnet has no depth " +
                                   std::to_string(cfg.num_layers));
  }
  if (cfg.image_shape.size() != 3 || cfg.num_classes < 1) {
    return Status::InvalidArgument("ONNX export: a model needs an image shape C,H,W and at "
                                   "least one class, got " + ShapeString(cfg.image_shape) +
                                   " and " + std::to_string(cfg.num_classes));
  }
  if (OnnxIrVersion(opt.opset) == 0) {
    return Status::InvalidArgument("--opset " + std::to_string(opt.opset) + ": ONNX export " +
                                   "writes opsets " + std::to_string(kOnnxMinOpset) + " to " +
                                   std::to_string(kOnnxMaxOpset));
  }
  if (opt.weight_dtype != DType::kF32 && opt.weight_dtype != DType::kF16) {
    return Status::InvalidArgument(std::string("--dtype ") + DTypeName(opt.weight_dtype) +
                                   ": ONNX export stores weights as float32 or float16");
  }
  GraphBuilder graph(cfg, params, opt);
  TALLY_RETURN_IF_ERROR(graph.Build(depth));
  return graph.Write(path);
}

}  // namespace tally
