#include "tools/train_checkpoints.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <gflags/gflags.h>

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

Status CheckResumable(const Checkpoint& c, int64_t number, int num_workers) {
  const std::string file = CheckpointPath(FLAGS_model_prefix, number, ".params");
  const std::map<std::string, std::string> now = RunInfo(num_workers);
  std::vector<std::string> must_match = {"network", "num_layers", "num_classes", "image_shape"};
  if (c.batch > 0) {  // inside an epoch: the data position means something only for the same split
    must_match.insert(must_match.end(), {"batch_size", "num_workers", "seed", "data_train"});
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

}  // namespace

Status FindResumePoint(int num_workers, Checkpoint* c, bool* found, bool* complete) {
  *found = false;
  *complete = false;
  int64_t number = FLAGS_load_epoch;
  if (FLAGS_resume == "auto") {
    Status s = LatestCheckpoint(FLAGS_model_prefix, &number);
    if (s.code() == Status::Code::kNotFound) {
      std::printf("tally train: no checkpoint %s-NNNN.params yet: starting from the beginning\n",
                  FLAGS_model_prefix.c_str());
      return Status::Ok();
    }
    TALLY_RETURN_IF_ERROR(s);
  } else if (number < 0) {
    return Status::Ok();
  }
  TALLY_RETURN_IF_ERROR(LoadCheckpoint(FLAGS_model_prefix, number, c));
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
  TALLY_RETURN_IF_ERROR(trainer->Snapshot(&c));
  TALLY_RETURN_IF_ERROR(SaveCheckpoint(FLAGS_model_prefix, c));
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
