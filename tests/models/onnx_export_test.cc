// models/onnx_export.h: the ONNX file written for a CIFAR ResNet-8 and a ResNet-50 is
// decoded here with a small protobuf reader of the test's own, and checked against the
// networks that models/resnet.cc builds: the node sequence and attributes, every
// initializer's name, dims and bytes (convolutions permuted to [K, C, R, S]), the graph's
// inputs and outputs, the model's header and metadata; and the refusals of a wrong
// parameter list. tests/tools/onnx_export_test.py checks the files with onnx's checker and
// runs them in onnxruntime.
#include "models/onnx_export.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "models/onnx_proto.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

// One protobuf field: varints (and fixed32, as their bits) in `value`, length-delimited
// fields in `bytes`.
struct Field {
  int number;
  int wire;
  uint64_t value;
  std::string_view bytes;
};

uint64_t ReadVarint(std::string_view b, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; *pos < b.size() && shift < 64; shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(b[(*pos)++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  ADD_FAILURE() << "a varint runs past its message";
  return v;
}

std::vector<Field> Parse(std::string_view b) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < b.size()) {
    const uint64_t tag = ReadVarint(b, &pos);
    Field f{static_cast<int>(tag >> 3), static_cast<int>(tag & 7), 0, {}};
    if (f.wire == onnx::kWireVarint) {
      f.value = ReadVarint(b, &pos);
    } else if (f.wire == onnx::kWireLengthDelimited) {
      const uint64_t n = ReadVarint(b, &pos);
      if (n > b.size() - pos) {
        ADD_FAILURE() << "field " << f.number << " is longer than its message";
        return fields;
      }
      f.bytes = b.substr(pos, n);
      pos += n;
    } else if (f.wire == onnx::kWireFixed32 && pos + 4 <= b.size()) {
      uint32_t bits;
      std::memcpy(&bits, b.data() + pos, 4);
      f.value = bits;
      pos += 4;
    } else {
      ADD_FAILURE() << "field " << f.number << " has wire type " << f.wire;
      return fields;
    }
    fields.push_back(f);
  }
  return fields;
}

std::vector<Field> All(std::string_view msg, int number) {
  std::vector<Field> out;
  for (const Field& f : Parse(msg)) {
    if (f.number == number) out.push_back(f);
  }
  return out;
}

Field One(std::string_view msg, int number) {
  std::vector<Field> all = All(msg, number);
  EXPECT_EQ(all.size(), 1u) << "field " << number;
  return all.empty() ? Field{number, -1, 0, {}} : all[0];
}

std::string Str(std::string_view msg, int number) { return std::string(One(msg, number).bytes); }

std::vector<int64_t> Ints(std::string_view msg, int number) {
  std::vector<int64_t> out;
  for (const Field& f : All(msg, number)) out.push_back(static_cast<int64_t>(f.value));
  return out;
}

std::vector<std::string> Strs(std::string_view msg, int number) {
  std::vector<std::string> out;
  for (const Field& f : All(msg, number)) out.emplace_back(f.bytes);
  return out;
}

// The attribute `name` of a NodeProto.
std::string_view Attr(std::string_view node, const std::string& name) {
  for (const Field& a : All(node, onnx::kNodeAttribute)) {
    if (Str(a.bytes, onnx::kAttrName) == name) return a.bytes;
  }
  ADD_FAILURE() << "no attribute " << name << " in node " << Str(node, onnx::kNodeName);
  return {};
}

std::string TempPath(const std::string& name) {
  static ScopedTempDir dir("onnx_export_test");
  return dir.Path(name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

ModelConfig Config(const std::string& network, int layers, int classes, Shape image) {
  ModelConfig cfg;
  cfg.network = network;
  cfg.num_layers = layers;
  cfg.num_classes = classes;
  cfg.image_shape = image;
  cfg.seed = 7;
  return cfg;
}

std::vector<NamedTensor> Params(const ModelConfig& cfg) {
  std::unique_ptr<Network> net;
  Status s = CreateNetwork(cfg, &net);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<NamedTensor> params;
  for (const Parameter* p : net->Parameters()) params.push_back({p->name, p->value});
  return params;
}

// Writes the model and returns its GraphProto, after checking the ModelProto around it.
std::string WriteAndReadGraph(const std::string& file, const ModelConfig& cfg,
                              const std::vector<NamedTensor>& params, const OnnxOptions& opt) {
  const std::string path = TempPath(file);
  Status s = WriteOnnx(path, cfg, params, opt);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const std::string model = ReadFile(path);
  EXPECT_EQ(One(model, onnx::kModelIrVersion).value, uint64_t(OnnxIrVersion(opt.opset)));
  EXPECT_EQ(Str(model, onnx::kModelProducerName), "tally");
  std::string_view opset = One(model, onnx::kModelOpsetImport).bytes;
  EXPECT_EQ(Str(opset, onnx::kOpsetDomain), "");
  EXPECT_EQ(One(opset, onnx::kOpsetVersion).value, uint64_t(opt.opset));
  std::map<std::string, std::string> metadata;
  for (const Field& e : All(model, onnx::kModelMetadataProps)) {
    metadata[Str(e.bytes, onnx::kEntryKey)] = Str(e.bytes, onnx::kEntryValue);
  }
  const Shape& im = cfg.image_shape;
  std::map<std::string, std::string> want = {
      {"network", cfg.network}, {"num_layers", std::to_string(cfg.num_layers)},
      {"num_classes", std::to_string(cfg.num_classes)},
      {"image_shape", std::to_string(im[0]) + "," + std::to_string(im[1]) + "," +
                      std::to_string(im[2])}};
  want.insert(opt.metadata.begin(), opt.metadata.end());
  EXPECT_EQ(metadata, want);
  return std::string(One(model, onnx::kModelGraph).bytes);
}

// A ValueInfoProto's name and dims; a symbolic dimension reads as its name.
std::pair<std::string, std::vector<std::string>> ValueInfo(std::string_view info) {
  std::string_view type = One(info, onnx::kValueType).bytes;
  std::string_view tensor = One(type, onnx::kTypeTensor).bytes;
  EXPECT_EQ(One(tensor, onnx::kTensorTypeElemType).value, uint64_t(onnx::kFloat));
  std::vector<std::string> dims;
  for (const Field& d : All(One(tensor, onnx::kTensorTypeShape).bytes, onnx::kShapeDim)) {
    std::vector<Field> v = Parse(d.bytes);
    EXPECT_EQ(v.size(), 1u);
    if (v.empty()) continue;
    dims.push_back(v[0].number == onnx::kDimParam ? std::string(v[0].bytes)
                                                 : std::to_string(v[0].value));
  }
  return {Str(info, onnx::kValueName), dims};
}

// The graph's op types in order, after checking that it is topologically sorted: every
// input is "data", an initializer (or its Cast) or an earlier node's output.
std::vector<std::string> OpTypes(std::string_view graph) {
  std::set<std::string> known = {"data"};
  for (const Field& t : All(graph, onnx::kGraphInitializer)) {
    known.insert(Str(t.bytes, onnx::kTensorName));
  }
  std::vector<std::string> ops;
  for (const Field& n : All(graph, onnx::kGraphNode)) {
    for (const std::string& in : Strs(n.bytes, onnx::kNodeInput)) {
      EXPECT_TRUE(known.count(in)) << Str(n.bytes, onnx::kNodeName) << " reads " << in;
    }
    const std::string out = Str(n.bytes, onnx::kNodeOutput);
    EXPECT_TRUE(known.insert(out).second) << out << " is written twice";
    ops.push_back(Str(n.bytes, onnx::kNodeOpType));
  }
  return ops;
}

// The op types of resnet.cc's ResNet with `blocks` per stage, `projected` of them with a
// 1x1 projection shortcut, `convs` per block.
std::vector<std::string> ExpectedOps(bool imagenet, const std::vector<int>& blocks,
                                     int convs) {
  std::vector<std::string> ops = {"Conv", "BatchNormalization", "Relu"};
  if (imagenet) ops.push_back("MaxPool");
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    for (int b = 0; b < blocks[stage]; ++b) {
      for (int c = 0; c < convs; ++c) {
        ops.insert(ops.end(), {"Conv", "BatchNormalization"});
        if (c + 1 < convs) ops.push_back("Relu");
      }
      // The first block of a stage changes the shape, but for the first stage only a
      // bottleneck (64 -> 256 channels) does.
      if (b == 0 && (stage > 0 || convs == 3)) {
        ops.insert(ops.end(), {"Conv", "BatchNormalization"});
      }
      ops.insert(ops.end(), {"Add", "Relu"});
    }
  }
  ops.insert(ops.end(), {"GlobalAveragePool", "Flatten", "Gemm"});
  return ops;
}

// The initializers hold the parameters in their order, convolutions as [K, C, R, S].
void ExpectInitializers(std::string_view graph, const std::vector<NamedTensor>& params) {
  std::vector<Field> inits = All(graph, onnx::kGraphInitializer);
  ASSERT_EQ(inits.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    std::string_view t = inits[i].bytes;
    const NamedTensor& p = params[i];
    EXPECT_EQ(Str(t, onnx::kTensorName), p.name);
    EXPECT_EQ(One(t, onnx::kTensorDataType).value, uint64_t(onnx::kFloat)) << p.name;
    const Shape& s = p.tensor.shape();
    const Shape want = s.size() == 4 ? Shape{s[0], s[3], s[1], s[2]} : s;
    EXPECT_EQ(Ints(t, onnx::kTensorDims), want) << p.name;
    const Tensor onnx_layout = s.size() == 4 ? NhwcToNchw(p.tensor) : p.tensor;
    std::string_view raw = One(t, onnx::kTensorRawData).bytes;
    ASSERT_EQ(raw.size(), onnx_layout.nbytes()) << p.name;
    EXPECT_EQ(std::memcmp(raw.data(), onnx_layout.raw_data(), raw.size()), 0) << p.name;
  }
}

const NamedTensor& Find(const std::vector<NamedTensor>& params, const std::string& name) {
  for (const NamedTensor& p : params) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no parameter " << name;
  return params[0];
}

TEST(OnnxExportTest, CifarResNet8GraphAndWeights) {
  const ModelConfig cfg = Config("resnet", 8, 4, {3, 16, 16});
  const std::vector<NamedTensor> params = Params(cfg);
  OnnxOptions opt;
  opt.metadata["step"] = "42";
  const std::string graph = WriteAndReadGraph("resnet8.onnx", cfg, params, opt);

  EXPECT_EQ(OpTypes(graph), ExpectedOps(false, {1, 1, 1}, 2));
  EXPECT_EQ(All(graph, onnx::kGraphNode).size(), 31u);
  ExpectInitializers(graph, params);
  EXPECT_EQ(Str(graph, onnx::kGraphName), "resnet-8");
  auto [in_name, in_dims] = ValueInfo(One(graph, onnx::kGraphInput).bytes);
  EXPECT_EQ(in_name, "data");
  EXPECT_EQ(in_dims, (std::vector<std::string>{"N", "3", "16", "16"}));
  auto [out_name, out_dims] = ValueInfo(One(graph, onnx::kGraphOutput).bytes);
  EXPECT_EQ(out_name, "logits");
  EXPECT_EQ(out_dims, (std::vector<std::string>{"N", "4"}));

  // One convolution's values element by element: ONNX [k, c, r, s] is Tally's [k, r, s, c].
  const Tensor& w = Find(params, "layer2.0.conv1.weight").tensor;  // [32, 3, 3, 16]
  for (const Field& t : All(graph, onnx::kGraphInitializer)) {
    if (Str(t.bytes, onnx::kTensorName) != "layer2.0.conv1.weight") continue;
    std::string_view raw = One(t.bytes, onnx::kTensorRawData).bytes;
    const int64_t K = w.dim(0), R = w.dim(1), S = w.dim(2), C = w.dim(3);
    int mismatches = 0;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t s = 0; s < S; ++s) {
            float got;
            std::memcpy(&got, raw.data() + 4 * (((k * C + c) * R + r) * S + s), 4);
            mismatches += got != w.data<float>()[((k * R + r) * S + s) * C + c];
          }
    EXPECT_EQ(mismatches, 0);
  }

  // The stem, a strided block and the head, attribute by attribute.
  std::vector<Field> nodes = All(graph, onnx::kGraphNode);
  std::string_view conv1 = nodes[0].bytes;
  EXPECT_EQ(Strs(conv1, onnx::kNodeInput), (std::vector<std::string>{"data", "conv1.weight"}));
  EXPECT_EQ(Ints(Attr(conv1, "kernel_shape"), onnx::kAttrInts), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(Ints(Attr(conv1, "pads"), onnx::kAttrInts), (std::vector<int64_t>{1, 1, 1, 1}));
  std::string_view bn1 = nodes[1].bytes;
  EXPECT_EQ(Strs(bn1, onnx::kNodeInput),
            (std::vector<std::string>{"conv1", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                      "bn1.running_var"}));
  uint32_t eps_bits = static_cast<uint32_t>(One(Attr(bn1, "epsilon"), onnx::kAttrF).value);
  float eps;
  std::memcpy(&eps, &eps_bits, 4);
  EXPECT_EQ(eps, cfg.bn_eps);
  for (const Field& n : nodes) {
    const std::string name = Str(n.bytes, onnx::kNodeName);
    if (name == "layer2.0.conv1" || name == "layer2.0.downsample.0") {
      EXPECT_EQ(Ints(Attr(n.bytes, "strides"), onnx::kAttrInts), (std::vector<int64_t>{2, 2}))
          << name;
    }
    if (name == "layer2.0.add") {
      EXPECT_EQ(Strs(n.bytes, onnx::kNodeInput),
                (std::vector<std::string>{"layer2.0.bn2", "layer2.0.downsample.1"}));
    }
  }
  std::string_view gemm = nodes.back().bytes;
  EXPECT_EQ(Strs(gemm, onnx::kNodeInput),
            (std::vector<std::string>{"flatten", "fc.weight", "fc.bias"}));
  EXPECT_EQ(One(Attr(gemm, "transB"), onnx::kAttrI).value, 1u);
  EXPECT_EQ(Str(gemm, onnx::kNodeOutput), "logits");
}

// The stride of the first bottleneck of stage 2 sits in its 3x3 convolution for "resnet"
// and in its first 1x1 for "resnet-v1"; the parameters are the same.
TEST(OnnxExportTest, ResNet50BottlenecksAndStridePlacement) {
  const ModelConfig cfg = Config("resnet", 50, 10, {3, 32, 32});
  const std::vector<NamedTensor> params = Params(cfg);
  for (const char* network : {"resnet", "resnet-v1"}) {
    ModelConfig c = cfg;
    c.network = network;
    OnnxOptions opt;
    opt.opset = 17;
    const std::string graph = WriteAndReadGraph("resnet50.onnx", c, params, opt);
    EXPECT_EQ(OpTypes(graph), ExpectedOps(true, {3, 4, 6, 3}, 3)) << network;
    EXPECT_EQ(All(graph, onnx::kGraphNode).size(), 175u);
    ExpectInitializers(graph, params);
    const bool v1 = c.network == "resnet-v1";
    for (const Field& n : All(graph, onnx::kGraphNode)) {
      const std::string name = Str(n.bytes, onnx::kNodeName);
      if (name == "maxpool") {
        EXPECT_EQ(Ints(Attr(n.bytes, "pads"), onnx::kAttrInts), (std::vector<int64_t>{1, 1, 1, 1}));
      }
      if (name == "layer2.0.conv1" || name == "layer2.0.conv2") {
        const bool strided = (name == "layer2.0.conv1") == v1;
        EXPECT_EQ(Ints(Attr(n.bytes, "strides"), onnx::kAttrInts),
                  (std::vector<int64_t>(2, strided ? 2 : 1)))
            << network << " " << name;
      }
    }
  }
}

TEST(OnnxExportTest, Float16WeightsAreCastToFloat32) {
  const ModelConfig cfg = Config("resnet", 8, 4, {3, 16, 16});
  const std::vector<NamedTensor> params = Params(cfg);
  OnnxOptions opt;
  opt.weight_dtype = DType::kF16;
  const std::string graph = WriteAndReadGraph("resnet8_f16.onnx", cfg, params, opt);
  std::vector<Field> inits = All(graph, onnx::kGraphInitializer);
  ASSERT_EQ(inits.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(One(inits[i].bytes, onnx::kTensorDataType).value, uint64_t(onnx::kFloat16));
    const Tensor& t = params[i].tensor;
    const Tensor want = (t.ndim() == 4 ? NhwcToNchw(t) : t).To(DType::kF16);
    std::string_view raw = One(inits[i].bytes, onnx::kTensorRawData).bytes;
    ASSERT_EQ(raw.size(), want.nbytes());
    EXPECT_EQ(std::memcmp(raw.data(), want.raw_data(), raw.size()), 0) << params[i].name;
  }
  // Each initializer is read through its own Cast to float32, placed before its reader.
  std::vector<std::string> ops = OpTypes(graph);
  EXPECT_EQ(ops.size(), 31u + params.size());
  int casts = 0;
  for (const Field& n : All(graph, onnx::kGraphNode)) {
    if (Str(n.bytes, onnx::kNodeOpType) != "Cast") continue;
    ++casts;
    EXPECT_EQ(One(Attr(n.bytes, "to"), onnx::kAttrI).value, uint64_t(onnx::kFloat));
    EXPECT_EQ(Str(n.bytes, onnx::kNodeOutput), Strs(n.bytes, onnx::kNodeInput)[0] + ".float32");
  }
  EXPECT_EQ(casts, static_cast<int>(params.size()));
}

// A refused export names the tensor or flag at fault and leaves no file behind.
void ExpectRefused(const ModelConfig& cfg, const std::vector<NamedTensor>& params,
                   const OnnxOptions& opt, const std::string& needle) {
  const std::string path = TempPath("refused.onnx");
  Status s = WriteOnnx(path, cfg, params, opt);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(OnnxExportTest, RefusesAWrongParameterList) {
  const ModelConfig cfg = Config("resnet", 8, 4, {3, 16, 16});
  const std::vector<NamedTensor> params = Params(cfg);
  const OnnxOptions opt;

  std::vector<NamedTensor> missing = params;
  missing.erase(missing.begin() + 5);
  ExpectRefused(cfg, missing, opt, "tensor '" + params[5].name + "' is missing");

  std::vector<NamedTensor> extra = params;
  extra.push_back({"layer4.0.conv1.weight", params[0].tensor});
  ExpectRefused(cfg, extra, opt, "'layer4.0.conv1.weight' is not a parameter of a resnet-8");

  std::vector<NamedTensor> twice = params;
  twice.push_back(params[3]);
  ExpectRefused(cfg, twice, opt, "'" + params[3].name + "' is given twice");

  std::vector<NamedTensor> misshapen = params;
  for (NamedTensor& p : misshapen) {
    if (p.name == "layer1.0.conv2.weight") p.tensor = NhwcToNchw(p.tensor).Reshape({16, 16, 3, 3});
  }
  ExpectRefused(cfg, misshapen, opt, "'layer1.0.conv2.weight' is float32[16,16,3,3]");

  std::vector<NamedTensor> half = params;
  half.back().tensor = half.back().tensor.To(DType::kF16);
  ExpectRefused(cfg, half, opt, "'fc.bias' is float16");

  // The parameters of another model: 10 classes where the config says 4.
  ExpectRefused(Config("resnet", 8, 10, {3, 16, 16}), params, opt, "'fc.weight'");
}

TEST(OnnxExportTest, RefusesWhatItCannotWrite) {
  const ModelConfig cfg = Config("resnet", 8, 4, {3, 16, 16});
  const std::vector<NamedTensor> params = Params(cfg);
  OnnxOptions bf16;
  bf16.weight_dtype = DType::kBF16;
  ExpectRefused(cfg, params, bf16, "--dtype bfloat16");
  OnnxOptions old;
  old.opset = 10;
  ExpectRefused(cfg, params, old, "--opset 10");
  ExpectRefused(Config("vgg", 8, 4, {3, 16, 16}), params, OnnxOptions(), "'vgg'");
  ExpectRefused(Config("resnet", 9, 4, {3, 16, 16}), params, OnnxOptions(), "depth 9");
}

TEST(OnnxExportTest, IrVersionFollowsTheOpset) {
  EXPECT_EQ(OnnxIrVersion(10), 0);
  EXPECT_EQ(OnnxIrVersion(11), 6);
  EXPECT_EQ(OnnxIrVersion(13), 7);
  EXPECT_EQ(OnnxIrVersion(17), 8);
  EXPECT_EQ(OnnxIrVersion(19), 9);
  EXPECT_EQ(OnnxIrVersion(21), 10);
  EXPECT_EQ(OnnxIrVersion(22), 0);
}

TEST(OnnxExportTest, VarintsAndFloatsOnTheWire) {
  ProtoWriter w;
  w.Varint(1, 300);      // tag 0x08, then 0xac 0x02
  w.Varint(2, -1);       // ten bytes, as protobuf sign-extends negative int64
  w.Float(3, 1.0f);      // tag 0x1d, then 0x3f800000 little-endian
  w.String(20, "ab");    // a two-byte tag: (20 << 3 | 2) = 0xa2 0x01
  const std::string want = std::string("\x08\xac\x02", 3) + "\x10" + std::string(9, '\xff') +
                           "\x01" + std::string("\x1d\x00\x00\x80\x3f", 5) + "\xa2\x01\x02" "ab";
  EXPECT_EQ(w.bytes(), want);
  EXPECT_EQ(VarintSize(127), 1u);
  EXPECT_EQ(VarintSize(128), 2u);
  EXPECT_EQ(VarintSize(~uint64_t{0}), 10u);
  EXPECT_EQ(ProtoWriter::LengthDelimitedSize(20, 300), 2u + 2u + 300u);
}

}  // namespace
}  // namespace tally
