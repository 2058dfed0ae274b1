// Writes a ResNet's parameters as an ONNX model (inference graph plus weights) that
// onnxruntime, TensorRT or any ONNX importer runs without Tally:
//
//   std::unique_ptr<Network> net;                      // or params read from a checkpoint
//   TALLY_RETURN_IF_ERROR(CreateNetwork(cfg, &net));
//   std::vector<NamedTensor> params;
//   for (const Parameter* p : net->Parameters()) params.push_back({p->name, p->value});
//   OnnxOptions opt;                                   // opset 13, float32 weights
//   opt.metadata["step"] = "1200";
//   Status s = WriteOnnx("resnet50.onnx", cfg, params, opt);
//
// The graph takes "data", float32 [N, C, H, W] (N symbolic; images normalised as in
// training), and gives "logits", float32 [N, num_classes]. Its nodes follow models/resnet.cc
// (Conv, BatchNormalization with the running statistics, Relu, Add, MaxPool,
// GlobalAveragePool, Flatten, Gemm); the weights are initializers named by the parameters'
// names, convolutions in ONNX's [K, C, R, S]. docs/export.md ("ONNX") lists the nodes and
// the protobuf fields written. The protobuf is encoded here (models/onnx_proto.h), so Tally
// needs no ONNX or protobuf library. Thread-compatible: no shared state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/network.h"
#include "models/safetensors.h"

namespace tally {

struct OnnxOptions {
  // The ai.onnx operator set the graph imports; kOnnxMinOpset to kOnnxMaxOpset. The IR
  // version written is the one ONNX released with that opset (OnnxIrVersion).
  int opset = 13;
  // float32, or float16: every initializer is stored in float16 (half the file) and cast to
  // float32 by a Cast node, so the graph still computes and answers in float32.
  DType weight_dtype = DType::kF32;
  // More metadata_props entries (such as "step"), besides network, num_layers, num_classes
  // and image_shape, which are always written and win over an entry of the same key.
  std::map<std::string, std::string> metadata;
};

// The opsets whose operators used here have the semantics this graph relies on, and whose
// IR versions are known (11: ONNX 1.6 ... 21: ONNX 1.16).
constexpr int kOnnxMinOpset = 11;
constexpr int kOnnxMaxOpset = 21;

// The IR version ONNX released with `opset`; 0 outside [kOnnxMinOpset, kOnnxMaxOpset].
int OnnxIrVersion(int opset);

// Writes the model for cfg with `params`: Tally's parameters (names and shapes as
// Network::Parameters() gives them, float32 on the host, convolutions [K, R, S, C]), in any
// order. Every parameter of cfg's network must be there exactly once with its shape, and
// nothing else; otherwise InvalidArgument names the tensor. Also InvalidArgument for a
// network, depth, opset or weight dtype it cannot write (bfloat16 is refused: ONNX
// runtimes rarely run it); IoError naming the file when it cannot be written. The file is
// written beside `path` and renamed into place.
Status WriteOnnx(const std::string& path, const ModelConfig& cfg,
                 const std::vector<NamedTensor>& params, const OnnxOptions& opt);

}  // namespace tally
