#include "tools/train_checkpoints.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include <gflags/gflags.h>

#include "models/atomic_file.h"
#include "models/mxnet_names.h"
#include "models/mxnet_symbol.h"
#include "models/ndarray_file.h"
#include "tools/train_data.h"
#include "tools/train_elastic.h"

DECLARE_string(network);
DECLARE_int32(num_layers);
DECLARE_int32(num_classes);
DECLARE_string(image_shape);
DECLARE_int32(batch_size);
DECLARE_int32(num_epochs);
DECLARE_string(kv_store);
DECLARE_string(optimizer);
DECLARE_uint64(seed);
DECLARE_string(data_train);
DECLARE_string(model_prefix);
DECLARE_int32(load_epoch);
DECLARE_string(resume);
DECLARE_string(pretrained);

namespace tally {

std::map<std::string, std::string> RunInfo(int num_workers) {
  return {{"network", FLAGS_network},
          {"num_layers", std::to_string(FLAGS_num_layers)},
          {"num_classes", std::to_string(FLAGS_num_classes)},
          {"image_shape", FLAGS_image_shape},
          {"batch_size", std::to_string(FLAGS_batch_size)},
          {"num_workers", std::to_string(num_workers)},
          {"kv_store", FLAGS_kv_store},
          {"optimizer", FLAGS_optimizer},
          {"seed", std::to_string(FLAGS_seed)},
          {"data_train", FLAGS_data_train}};
}

namespace {

bool Elastic() {
  ElasticOptions e;
  return ElasticFlags(&e).ok() && e.elastic;
}

Status CheckResumable(const Checkpoint& c, int64_t number, int num_workers) {
  const std::string file = CheckpointPath(FLAGS_model_prefix, number, ".params");
  const std::map<std::string, std::string> now = RunInfo(num_workers);
  std::vector<std::string> must_match = {"network", "num_layers", "num_classes", "image_shape"};
  if (c.batch > 0) {  // inside an epoch: the data position means something only for the same split
    must_match.insert(must_match.end(), {"batch_size", "seed", "data_train"});
    // --elastic's record of the position (membership) holds for any workers the run gathers,
    // and only under --elastic: the epoch's cut changed with the workers.
    if (c.info.count("membership") && !Elastic()) {
      return Status::InvalidArgument(file + " was taken inside an epoch of an --elastic run: resume it with --elastic");
    }
    if (!c.info.count("membership")) must_match.push_back("num_workers");
  }
  for (const std::string& key : must_match) {
    auto it = c.info.find(key);
    if (it == c.info.end() || it->second != now.at(key)) {
      std::string flag = "--" + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (key == "num_workers") flag = "the worker count";
      return Status::InvalidArgument(file + " was written with " + flag + " '" +
                                     (it == c.info.end() ? "?" : it->second) + "', this run has '" + now.at(key) +
                                     "'" + (c.batch > 0 ? " (it was taken inside an epoch)" : ""));
    }
  }
  return Status::Ok();
}

void PrintNotes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::printf("tally train: %s\n", n.c_str());
}

// --load-epoch N naming an MXNet checkpoint of its own (read): its weights, and epoch N.
Status LoadForeign(WeightsFile read, int64_t number, const ModelConfig& model, Checkpoint* c) {
  const std::string file = read.path;
  std::vector<std::string> notes;
  TALLY_RETURN_IF_ERROR(ImportWeights(std::move(read), model, /*allow_new_classifier=*/false, c, &notes));
  PrintNotes(notes);
  c->epoch = number;
  c->batch = 0;
  c->step = 0;
  std::printf("tally train: --load-epoch: %s is MXNet's own checkpoint: training resumes in epoch %lld with its weights and a "
              "fresh optimizer state (MXNet's .states is not read)\n",
              file.c_str(), static_cast<long long>(number));
  return Status::Ok();
}

// A class count that comes from an untrusted file (`tally predict` takes it from a .params'
// metadata) must not size the network built to receive the weights before they are matched:
// a classifier of `num_classes` rows is among the file's arrays unless a new one may be made,
// so a count beyond the file's elements is refused, before the network is allocated.
Status CheckClassesFit(const std::string& path, const std::vector<NamedTensor>& arrays, const ModelConfig& model,
                       bool allow_new_classifier) {
  if (allow_new_classifier) return Status::Ok();
  int64_t elements = 0;
  for (const NamedTensor& a : arrays) {
    if (a.tensor.defined()) elements += a.tensor.numel();  // each fits the file: no overflow
  }
  if (model.num_classes > elements) {
    return Status::InvalidArgument(path + ": a classifier of " + std::to_string(model.num_classes) +
                                   " classes, but the file's arrays hold only " + std::to_string(elements) +
                                   " elements in all");
  }
  return Status::Ok();
}

// PREFIX-symbol.json, which MXNet's load_checkpoint reads beside the .params. Written with
// every checkpoint (a few tens of kB), through a temporary file, so it is always whole.
Status WriteSymbol(const ModelConfig& model, const Checkpoint& c) {
  std::string json;
  TALLY_RETURN_IF_ERROR(MxnetSymbolJson(model, c.params, &json));
  return WriteFileAtomically(FLAGS_model_prefix + "-symbol.json", [&](std::ostream& out) { out << json; });
}

}  // namespace

Status ReadWeightsFile(const std::string& path, WeightsFile* out) {
  out->path = path;
  return ReadParamsFile(path, &out->arrays, &out->meta, &out->foreign);
}

Status ImportWeights(const std::string& path, const ModelConfig& model, bool allow_new_classifier, Checkpoint* c,
                     std::vector<std::string>* notes) {
  WeightsFile file;
  TALLY_RETURN_IF_ERROR(ReadWeightsFile(path, &file));
  return ImportWeights(std::move(file), model, allow_new_classifier, c, notes);
}

Status ImportWeights(WeightsFile file, const ModelConfig& model, bool allow_new_classifier, Checkpoint* c,
                     std::vector<std::string>* notes) {
  const std::string& path = file.path;
  std::vector<NamedTensor>& arrays = file.arrays;
  std::map<std::string, std::string>& meta = file.meta;
  const bool foreign = file.foreign;
  if (!foreign && meta["format"] != "tally-params") {
    return Status::InvalidArgument(path + ": not a .params file (a safetensors file whose format is '" +
                                   meta["format"] + "')");
  }
  if (!foreign) {  // Tally's own .params: under Module names, as MXNet would hold them
    for (NamedTensor& a : arrays) a = {MxnetName(a.name, MxnetScheme::kModule), ToMxnetLayout(a.tensor)};
  }
  TALLY_RETURN_IF_ERROR(CheckClassesFit(path, arrays, model, allow_new_classifier));
  ModelConfig host = model;  // the names, shapes and initial values; the device plays no part
  host.device = Device::Cpu();
  host.dtype = DType::kF32;
  host.input_channels = 0;
  std::unique_ptr<Network> net;
  TALLY_RETURN_IF_ERROR(CreateNetwork(host, &net));
  ImportOptions options;
  options.allow_new_classifier = allow_new_classifier;
  ImportedWeights w;
  TALLY_RETURN_IF_ERROR(ImportMxnetWeights(path, arrays, net->Parameters(), host, options, &w));
  notes->push_back("the weights of " + path + " (" + (foreign ? MxnetSchemeName(w.scheme) : "a Tally checkpoint") +
                   ", " + std::to_string(w.params.size()) + " arrays)");
  if (!w.left_initial.empty()) {
    notes->push_back(w.left_initial[0] + " and " + w.left_initial.back() +
                     " initialised afresh: the file's classifier has another class count than --num-classes " +
                     std::to_string(model.num_classes));
  }
  const bool v1_file = w.scheme == MxnetScheme::kGluonV1, v1b_file = w.scheme == MxnetScheme::kGluonV1b;
  if (model.num_layers >= 50 && (v1_file || v1b_file) && v1_file != StrideIn1x1(model)) {
    notes->push_back(std::string("note: ") + MxnetSchemeName(w.scheme) + "'s bottlenecks stride in the " +
                     (v1_file ? "first 1x1" : "3x3") + " convolution, --network " + model.network + "'s in the " +
                     (v1_file ? "3x3" : "first 1x1") + ": pass --network " + (v1_file ? "resnet-v1" : "resnet") +
                     " to compute what MXNet does");
  }
  c->params = std::move(w.params);
  c->states.clear();
  c->weights_only = true;
  return Status::Ok();
}

Status FindResumePoint(int num_workers, const ModelConfig& model, Checkpoint* c, bool* found, bool* complete) {
  *found = false;
  *complete = false;
  int64_t number = FLAGS_load_epoch;
  if (FLAGS_resume == "auto") {
    Status s = LatestCheckpoint(FLAGS_model_prefix, &number);
    if (s.code() == Status::Code::kNotFound) {
      std::printf("tally train: no checkpoint %s-NNNN.params yet: starting from the beginning\n",
                  FLAGS_model_prefix.c_str());
      number = -1;
    } else {
      TALLY_RETURN_IF_ERROR(s);
    }
  }
  if (number < 0) {
    if (FLAGS_pretrained.empty()) return Status::Ok();
    std::vector<std::string> notes;
    TALLY_RETURN_IF_ERROR(ImportWeights(FLAGS_pretrained, model, /*allow_new_classifier=*/true, c, &notes));
    notes[0] = "--pretrained: starting from " + notes[0];
    PrintNotes(notes);
    *found = true;
    return Status::Ok();
  }
  Status loaded = LoadCheckpoint(FLAGS_model_prefix, number, c);
  if (!loaded.ok() && FLAGS_resume != "auto") {
    // Not one of Tally's: MXNet's own checkpoint loads as weights (read again: a rare path,
    // where Tally's own checkpoints are read once).
    WeightsFile read;
    if (ReadWeightsFile(CheckpointPath(FLAGS_model_prefix, number, ".params"), &read).ok() && read.foreign) {
      TALLY_RETURN_IF_ERROR(LoadForeign(std::move(read), number, model, c));
      *found = true;
      return Status::Ok();
    }
  }
  TALLY_RETURN_IF_ERROR(loaded);
  TALLY_RETURN_IF_ERROR(CheckResumable(*c, number, num_workers));
  if (c->epoch >= FLAGS_num_epochs) {
    if (FLAGS_resume == "auto") {  // the same command run again after the run ended
      std::printf("tally train: %s ends the run (--num-epochs %d): nothing left to train\n",
                  CheckpointPath(FLAGS_model_prefix, number, ".params").c_str(), FLAGS_num_epochs);
      *complete = true;
      return Status::Ok();
    }
    return Status::InvalidArgument(CheckpointPath(FLAGS_model_prefix, number, ".params") + " resumes in epoch " +
                                   std::to_string(c->epoch) + ", but --num-epochs is " +
                                   std::to_string(FLAGS_num_epochs) + ": the run is complete");
  }
  std::printf("tally train: resuming from %s: epoch %lld, batch %lld, step %lld\n",
              CheckpointPath(FLAGS_model_prefix, number, ".params").c_str(), static_cast<long long>(c->epoch),
              static_cast<long long>(c->batch), static_cast<long long>(c->step));
  *found = true;
  return Status::Ok();
}

Status SaveAt(Trainer* trainer, int num_workers, int64_t epoch, int64_t batch, int64_t step) {
  Checkpoint c;
  c.info = RunInfo(num_workers);
  c.epoch = epoch;
  c.batch = batch;
  c.step = step;
  TALLY_RETURN_IF_ERROR(AddElasticCheckpointInfo(step, &c.info));
  TALLY_RETURN_IF_ERROR(trainer->Snapshot(&c));
  TALLY_RETURN_IF_ERROR(SaveCheckpoint(FLAGS_model_prefix, c));
  TALLY_RETURN_IF_ERROR(WriteSymbol(trainer->config().model, c));
  std::printf("Saved checkpoint to \"%s\"\n", CheckpointPath(FLAGS_model_prefix, epoch, ".params").c_str());
  std::fflush(stdout);
  return Status::Ok();
}

Status MakePrefixDirectory() {
  const std::filesystem::path dir = std::filesystem::path(FLAGS_model_prefix).parent_path();
  if (dir.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Status::IoError("--model-prefix " + FLAGS_model_prefix + ": cannot create directory " + dir.string() +
                           ": " + ec.message());
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return Status::IoError("--model-prefix " + FLAGS_model_prefix + ": directory " + dir.string() + " is not writable");
  }
  return Status::Ok();
}

}  // namespace tally
