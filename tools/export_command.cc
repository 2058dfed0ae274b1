// tally export: converts a checkpoint's .params file into a safetensors file that PyTorch's
// ResNet (torchvision's, or tools/torch_cifar_resnet.py's CIFAR ResNet) loads with
// load_state_dict(strict=True). docs/export.md describes what is written and why.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gflags/gflags.h>

#include "models/network.h"
#include "models/onnx_export.h"
#include "models/safetensors.h"
#include "tools/command.h"
#include "tools/data_tools.h"
#include "worker/checkpoint.h"

DEFINE_string(params, "", "export: the checkpoint's .params file (or the first positional argument)");
DECLARE_string(out);
DECLARE_string(dtype);
// --format onnx: the checkpoint as an ONNX inference graph (models/onnx_export.h).
DEFINE_string(format, "safetensors", "export: safetensors (PyTorch's ResNet) or onnx");
DEFINE_int32(opset, 13, "export --format onnx: the ai.onnx operator set, 11 to 21");

namespace tally {
namespace {

const char kCmd[] = "tally export";
// What a .params file's metadata says it is (written by `tally train --model-prefix`).
const char kParamsFormat[] = "tally-params";
const char kParamsVersion[] = "2";  // 1: safetensors; 2: MXNet's NDArray file

// The metadata value `key`, or an error naming the file when it is absent.
Status Meta(const std::string& path, const SafetensorsFile& f, const std::string& key,
            std::string* value) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) {
    return Status::InvalidArgument(path + ": the checkpoint's metadata lacks '" + key + "'");
  }
  *value = it->second;
  return Status::Ok();
}

Status MetaInt(const std::string& path, const SafetensorsFile& f, const std::string& key,
               int64_t* value) {
  std::string text;
  TALLY_RETURN_IF_ERROR(Meta(path, f, key, &text));
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0) {
    return Status::InvalidArgument(path + ": metadata '" + key + "' is '" + text +
                                   "', not a non-negative integer");
  }
  *value = v;
  return Status::Ok();
}

// Reads a .params file and the model it describes; checks that its tensors are exactly that
// model's parameters (names, shapes, F32), so that the export loads strictly in PyTorch.
Status ReadParams(const std::string& path, SafetensorsFile* f, ModelConfig* cfg,
                  int64_t* step) {
  bool foreign = false;
  Status read = ReadParamsFile(path, &f->tensors, &f->metadata, &foreign);
  if (read.code() == Status::Code::kInvalidArgument) {
    return Status::InvalidArgument(read.message() + " (not a .params checkpoint, or a damaged one)");
  }
  TALLY_RETURN_IF_ERROR(read);
  if (foreign) {
    return Status::InvalidArgument(path + ": an MXNet .params without Tally's metadata; `tally train --pretrained " +
                                   path + "` starts from it, and that run's checkpoints export");
  }
  auto format = f->metadata.find("format");
  if (format == f->metadata.end() || format->second != kParamsFormat) {
    return Status::InvalidArgument(
        path + ": not a Tally .params checkpoint (its safetensors metadata has " +
        (format == f->metadata.end() ? std::string("no \"format\"")
                                     : "\"format\": \"" + format->second + "\"") +
        ", expected \"" + kParamsFormat + "\")");
  }
  std::string version, image_shape;
  TALLY_RETURN_IF_ERROR(Meta(path, *f, "version", &version));
  if (version != "1" && version != kParamsVersion) {
    return Status::InvalidArgument(path + ": .params version " + version +
                                   " is not supported (this tally reads versions 1 and " +
                                   kParamsVersion + ")");
  }
  int64_t layers, classes;
  TALLY_RETURN_IF_ERROR(Meta(path, *f, "network", &cfg->network));
  TALLY_RETURN_IF_ERROR(MetaInt(path, *f, "num_layers", &layers));
  TALLY_RETURN_IF_ERROR(MetaInt(path, *f, "num_classes", &classes));
  TALLY_RETURN_IF_ERROR(MetaInt(path, *f, "step", step));
  TALLY_RETURN_IF_ERROR(Meta(path, *f, "image_shape", &image_shape));
  // The network is built from the metadata before its tensors are compared: a class count
  // beyond the file's elements (its classifier could not be in it) would size that network
  // from an untrusted number, so it is refused first. Depths past an int are never valid.
  int64_t elements = 0;
  for (const NamedTensor& t : f->tensors) elements += t.tensor.defined() ? t.tensor.numel() : 0;
  if (classes > elements || layers > 100000) {
    return Status::InvalidArgument(path + ": metadata 'num_classes' " + std::to_string(classes) + " or 'num_layers' " +
                                   std::to_string(layers) + " cannot describe the " + std::to_string(elements) +
                                   " elements the file holds");
  }
  cfg->num_layers = static_cast<int>(layers);
  cfg->num_classes = static_cast<int>(classes);
  Status s = ParseImageShape(image_shape, &cfg->image_shape);
  std::unique_ptr<Network> net;
  if (s.ok()) s = CreateNetwork(*cfg, &net);
  if (!s.ok()) return Status::InvalidArgument(path + ": the model in its metadata: " + s.message());

  const std::string model = cfg->network + "-" + std::to_string(cfg->num_layers) + " with " +
                            std::to_string(cfg->num_classes) + " classes";
  for (const Parameter* p : net->Parameters()) {
    const Tensor* t = f->Find(p->name);
    if (t == nullptr) {
      return Status::InvalidArgument(path + ": tensor '" + p->name + "' is missing (a " + model +
                                     " has it)");
    }
    if (t->dtype() != DType::kF32 || t->shape() != p->value.shape()) {
      return Status::InvalidArgument(path + ": tensor '" + p->name + "' is " + t->ToString() +
                                     "; a " + model + " has float32" +
                                     ShapeString(p->value.shape()));
    }
  }
  if (f->tensors.size() != net->Parameters().size()) {
    for (const NamedTensor& t : f->tensors) {
      bool known = false;
      for (const Parameter* p : net->Parameters()) known |= p->name == t.name;
      if (!known) {
        return Status::InvalidArgument(path + ": tensor '" + t.name + "' is not a parameter of a " +
                                       model);
      }
    }
  }
  // The tensors in the network's order, which is torchvision's state_dict order.
  std::vector<NamedTensor> ordered;
  for (const Parameter* p : net->Parameters()) ordered.push_back({p->name, *f->Find(p->name)});
  f->tensors = std::move(ordered);
  return Status::Ok();
}

RawNamedTensor Raw(const std::string& name, const Tensor& t) {
  return {name, SafetensorsDTypeName(t.dtype()), t.shape(),
          std::string(static_cast<const char*>(t.raw_data()), t.nbytes())};
}

// The state_dict PyTorch's ResNet expects: convolution weights permuted from Tally's
// [K, R, S, C] to [K, C, R, S], floats in `dtype`, and after each BatchNorm's running_var its
// num_batches_tracked (I64 scalar): PyTorch counts one per training forward, that is, per
// optimizer step.
std::vector<RawNamedTensor> ToTorch(const std::vector<NamedTensor>& params, int64_t step,
                                    DType dtype) {
  const std::string kRunningVar = ".running_var";
  std::vector<RawNamedTensor> out;
  for (const NamedTensor& p : params) {
    Tensor t = p.tensor.ndim() == 4 ? NhwcToNchw(p.tensor) : p.tensor;
    out.push_back(Raw(p.name, t.To(dtype)));
    const std::string& n = p.name;
    if (n.size() > kRunningVar.size() &&
        n.compare(n.size() - kRunningVar.size(), kRunningVar.size(), kRunningVar) == 0) {
      std::string bytes(reinterpret_cast<const char*>(&step), sizeof(step));  // little-endian
      out.push_back({n.substr(0, n.size() - kRunningVar.size()) + ".num_batches_tracked", "I64",
                     {}, bytes});
    }
  }
  return out;
}

// Writes the checkpoint's parameters as an ONNX model; the exit status of `tally export`.
int ExportOnnx(const std::vector<NamedTensor>& tensors, const ModelConfig& cfg, int64_t step,
               DType dtype, const std::string& params, const std::string& out) {
  OnnxOptions opt;
  opt.opset = FLAGS_opset;
  opt.weight_dtype = dtype;
  opt.metadata["step"] = std::to_string(step);
  Status s = WriteOnnx(out, cfg, tensors, opt);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.message().c_str());
    return 1;
  }
  std::error_code ec;
  std::printf("%s: wrote an ONNX model (opset %d, IR %d, %zu initializers in %s), %" PRIuMAX
              " bytes, to %s (%s-%d, step %" PRId64 ", from %s)\n",
              kCmd, opt.opset, OnnxIrVersion(opt.opset), tensors.size(), FLAGS_dtype.c_str(),
              static_cast<uintmax_t>(std::filesystem::file_size(out, ec)), out.c_str(),
              cfg.network.c_str(), cfg.num_layers, step, params.c_str());
  return 0;
}

}  // namespace

int ExportCommand(int argc, char** argv) {
  std::vector<std::string> args;
  TakePositionalArgs(&argc, argv, &args);
  ParseFlags(
      "tally export PARAMS OUT.safetensors [--dtype float32|float16|bfloat16]\n"
      "  (or --params PARAMS --out OUT.safetensors)\n"
      "  converts a checkpoint's .params file into a safetensors file that PyTorch's ResNet\n"
      "  (torchvision's, or tools/torch_cifar_resnet.py's) loads with load_state_dict(strict=True):\n"
      "  convolution weights as [K, C, R, S], plus each BatchNorm's num_batches_tracked\n"
      "  (= the checkpoint's step). See docs/export.md.\n"
      "  --format onnx [--opset 13]: an ONNX inference graph instead (float32 or float16 weights).",
      &argc, &argv, {__FILE__});
  std::string params = FLAGS_params, out = FLAGS_out;
  size_t next = 0;
  if (params.empty() && next < args.size()) params = args[next++];
  if (out.empty() && next < args.size()) out = args[next++];
  if (next < args.size()) UsageError(kCmd, "unexpected argument '" + args[next] + "'");
  if (params.empty() || out.empty()) UsageError(kCmd, "expected PARAMS and OUT.safetensors (see --help)");
  DType dtype;
  if (FLAGS_dtype == "float32") dtype = DType::kF32;
  else if (FLAGS_dtype == "float16") dtype = DType::kF16;
  else if (FLAGS_dtype == "bfloat16") dtype = DType::kBF16;
  else UsageError(kCmd, "--dtype '" + FLAGS_dtype + "': expected float32, float16 or bfloat16");
  if (FLAGS_format != "safetensors" && FLAGS_format != "onnx") {
    UsageError(kCmd, "--format '" + FLAGS_format + "': expected safetensors or onnx");
  }
  if (FLAGS_format == "onnx" && dtype == DType::kBF16) {
    UsageError(kCmd, "--dtype bfloat16: --format onnx stores weights as float32 or float16");
  }
  std::error_code ec;
  if (std::filesystem::equivalent(params, out, ec)) {
    UsageError(kCmd, out + " is the checkpoint itself; choose another output path");
  }

  SafetensorsFile file;
  ModelConfig cfg;
  int64_t step = 0;
  Status s = ReadParams(params, &file, &cfg, &step);
  if (s.ok() && FLAGS_format == "onnx") {
    return ExportOnnx(file.tensors, cfg, step, dtype, params, out);
  }
  std::vector<RawNamedTensor> tensors;
  if (s.ok()) {
    tensors = ToTorch(file.tensors, step, dtype);
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    for (const char* key : {"network", "num_layers", "num_classes", "image_shape", "epoch",
                            "batch", "step"}) {
      auto it = file.metadata.find(key);
      if (it != file.metadata.end()) metadata[key] = it->second;
    }
    s = WriteSafetensorsRaw(out, tensors, metadata);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.message().c_str());
    return 1;
  }
  std::printf("%s: wrote %zu tensors (%s), %" PRIuMAX " bytes, to %s (%s-%d, step %" PRId64
              ", from %s)\n",
              kCmd, tensors.size(), FLAGS_dtype.c_str(),
              static_cast<uintmax_t>(std::filesystem::file_size(out, ec)), out.c_str(),
              cfg.network.c_str(), cfg.num_layers, step, params.c_str());
  return 0;
}

}  // namespace tally
