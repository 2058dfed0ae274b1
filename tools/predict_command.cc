// tally predict: a model's logits for images given as an MXNet NDArray file, so that a model
// can be checked against MXNet, Gluon or PyTorch on the same input (docs/mxnet.md).
//
//   tally predict m-0003.params images.nd logits.nd
//   tally predict resnet50_v1.params images.nd logits.nd --network resnet-v1 --num-layers 50
//       --num-classes 1000
//
// The model is the one a Tally .params names in its metadata; for MXNet's and Gluon's files
// it is given by --network, --num-layers and --num-classes (train's flags), the image shape
// by the input. Runs on the CPU in float32, batch norm with its running statistics.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gflags/gflags.h>

#include "models/ndarray_file.h"
#include "tools/command.h"
#include "tools/data_tools.h"
#include "tools/train_checkpoints.h"
#include "worker/checkpoint.h"

DECLARE_string(network);
DECLARE_int32(num_layers);
DECLARE_int32(num_classes);
DEFINE_string(input_name, "data", "predict: the input file's array holding the images, float32 [N, C, H, W]");
DEFINE_int32(predict_batch, 32, "predict: images per forward pass");

namespace tally {
namespace {

const char kCmd[] = "tally predict";

Status ReadImages(const std::string& path, Tensor* images) {
  NDArrayFile f;
  TALLY_RETURN_IF_ERROR(ReadNDArrayFile(path, &f));
  const Tensor* x = f.Find(FLAGS_input_name);
  if (x == nullptr && f.arrays.size() == 1) x = &f.arrays[0].tensor;
  if (x == nullptr) return Status::InvalidArgument(path + ": no array named '" + FLAGS_input_name + "' (--input-name)");
  if (!x->defined() || x->ndim() != 4 || x->dtype() != DType::kF32) {
    return Status::InvalidArgument(path + ": the images must be float32 [N, C, H, W], not " +
                                   (x->defined() ? x->ToString() : std::string("an empty array")));
  }
  *images = *x;
  return Status::Ok();
}

// The model: from a Tally .params' metadata, else from the flags.
void ModelOf(const WeightsFile& params, const Tensor& images, ModelConfig* model) {
  model->network = FLAGS_network;
  model->num_layers = FLAGS_num_layers;
  model->num_classes = FLAGS_num_classes;
  if (!params.foreign) {
    auto meta = [&](const char* key) {
      auto it = params.meta.find(key);
      return it == params.meta.end() ? std::string() : it->second;
    };
    model->network = meta("network");
    model->num_layers = std::atoi(meta("num_layers").c_str());
    model->num_classes = std::atoi(meta("num_classes").c_str());
  }
  model->image_shape = {images.dim(1), images.dim(2), images.dim(3)};
}

Status Predict(const std::string& params, const std::string& input, const std::string& output) {
  Tensor images;
  TALLY_RETURN_IF_ERROR(ReadImages(input, &images));
  WeightsFile file;
  TALLY_RETURN_IF_ERROR(ReadWeightsFile(params, &file));
  ModelConfig model;
  ModelOf(file, images, &model);
  Checkpoint weights;
  std::vector<std::string> notes;
  TALLY_RETURN_IF_ERROR(ImportWeights(std::move(file), model, /*allow_new_classifier=*/false, &weights, &notes));
  for (const std::string& n : notes) std::fprintf(stderr, "%s: %s\n", kCmd, n.c_str());
  std::unique_ptr<Network> net;
  TALLY_RETURN_IF_ERROR(CreateNetwork(model, &net));
  std::map<std::string, const Tensor*> by_name;
  for (const NamedTensor& p : weights.params) by_name[p.name] = &p.tensor;
  for (Parameter* p : net->Parameters()) p->value.CopyFrom(*by_name.at(p->name));
  const Tensor nhwc = NchwToNhwc(images);
  const int64_t n = images.dim(0);
  Tensor logits = Tensor::Empty({n, model.num_classes}, DType::kF32);
  const int64_t per_image = nhwc.numel() / std::max<int64_t>(n, 1);
  for (int64_t first = 0; first < n; first += FLAGS_predict_batch) {
    const int64_t count = std::min<int64_t>(FLAGS_predict_batch, n - first);
    Tensor batch = Tensor::Empty({count, nhwc.dim(1), nhwc.dim(2), nhwc.dim(3)}, DType::kF32);
    std::copy_n(nhwc.data<float>() + first * per_image, count * per_image, batch.data<float>());
    Tensor y = net->Forward(batch, /*training=*/false);
    std::copy_n(y.data<float>(), count * model.num_classes, logits.data<float>() + first * model.num_classes);
  }
  TALLY_RETURN_IF_ERROR(WriteNDArrayFile(output, {{"logits", logits}}));
  std::printf("%s: wrote the logits of %lld images (%s-%d, %d classes) to %s\n", kCmd, static_cast<long long>(n),
              model.network.c_str(), model.num_layers, model.num_classes, output.c_str());
  return Status::Ok();
}

}  // namespace

int PredictCommand(int argc, char** argv) {
  std::vector<std::string> args;
  TakePositionalArgs(&argc, argv, &args);
  ParseFlags(
      "tally predict PARAMS IMAGES.nd LOGITS.nd [--network resnet-v1 --num-layers 50 --num-classes 1000]\n"
      "  runs a model on images in an NDArray file (mx.nd.save({'data': x}), float32 NCHW) and writes\n"
      "  {'logits': [N, classes]} to LOGITS.nd. PARAMS: a Tally checkpoint's .params (the model is its\n"
      "  own), or MXNet Module / Gluon v1 / GluonCV v1b weights, whose model --network, --num-layers\n"
      "  and --num-classes give.",
      &argc, &argv, {__FILE__});
  if (args.size() != 3) UsageError(kCmd, "expected PARAMS IMAGES.nd LOGITS.nd (see --help)");
  if (FLAGS_predict_batch < 1) UsageError(kCmd, "--predict-batch must be positive");
  Status s = Predict(args[0], args[1], args[2]);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tally
