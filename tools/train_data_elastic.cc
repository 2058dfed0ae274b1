// `tally train --elastic`'s training source: the step-by-step cut of data/elastic_reader.h
// behind BatchSource (train_data.h), the test hook that logs what each worker read, and the
// data position a checkpoint records.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>

#include "base/fault_hooks.h"
#include "models/atomic_file.h"
#include "tools/train_data.h"

DECLARE_string(model_prefix);

namespace tally {
namespace {

class ElasticSource;
// The process's elastic training source, for its checkpoints (one training source a process).
ElasticSource* g_source = nullptr;

class ElasticSource : public BatchSource {
 public:
  // offset: added to Fit's steps for the job's (a joiner counts from its store's first step,
  // which a resumed run's servers count from the run's start).
  ElasticSource(std::unique_ptr<ElasticReader> reader, int rank, int64_t lr_batches, int64_t offset, ExampleReadFn read)
      : reader_(std::move(reader)), rank_(rank), lr_batches_(lr_batches), offset_(offset), read_(std::move(read)) {
    g_source = this;
    const std::string& dir = FaultHooksInEffect().read_log;
    if (!dir.empty()) log_ = std::fopen((dir + "/reads-" + std::to_string(rank_) + ".txt").c_str(), "a");
  }
  ~ElasticSource() override {
    if (g_source == this) g_source = nullptr;
    if (log_ != nullptr) std::fclose(log_);
  }

  bool elastic() const override { return true; }
  int64_t batches_per_epoch() const override { return lr_batches_; }

  Status PlaceStep(int64_t step, const std::function<Status()>& settle, Place* out) override {
    TALLY_RETURN_IF_ERROR(reader_->Place(step + offset_, settle, &at_));
    step_ = step + offset_;
    out->epoch = at_.epoch;
    out->batch = at_.index;
    out->epoch_batches = at_.epoch_batches;
    // The schedule moves through an epoch with the share of its examples read, in units of
    // the starting workers' epoch: a longer epoch (after a leave) stretches it, never back.
    const int64_t n = reader_->num_examples();
    out->lr_batch = at_.epoch * lr_batches_ + std::min(lr_batches_ - 1, (at_.given * lr_batches_) / n);
    return Status::Ok();
  }

  Status Next(Tensor* images, Tensor* labels) override {
    if (step_ < 0) return Status::Internal("elastic data: Next before PlaceStep");
    TALLY_RETURN_IF_ERROR(read_(*reader_, at_, step_, images, labels));
    if (log_ != nullptr) Log();
    return Status::Ok();
  }

  Status AddInfo(int64_t step, std::map<std::string, std::string>* info) {
    ElasticRecord record;
    TALLY_RETURN_IF_ERROR(reader_->Record(step, &record));
    (*info)["membership"] = record.ToJson();
    return Status::Ok();
  }

 private:
  // TALLY_TEST_READ_LOG: "step epoch batch reads pad positions...", a line a step.
  void Log() {
    std::string line = std::to_string(step_) + " " + std::to_string(at_.epoch) + " " + std::to_string(at_.index) +
                       " " + (at_.reads ? "1" : "0") + " " + std::to_string(at_.batch.pad);
    for (int64_t p : at_.batch.positions) line += " " + std::to_string(p);
    std::fprintf(log_, "%s\n", line.c_str());
    std::fflush(log_);
  }

  std::unique_ptr<ElasticReader> reader_;
  const int rank_;
  const int64_t lr_batches_;
  const int64_t offset_;
  ExampleReadFn read_;
  ElasticStep at_;
  int64_t step_ = -1;
  FILE* log_ = nullptr;
};

std::vector<int> AllRanks(int workers) {
  std::vector<int> ranks(static_cast<size_t>(workers));
  for (int r = 0; r < workers; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

// PREFIX-run.json (docs/checkpoint.md): where this run of the job started reading. Worker 0
// writes it at the run's start; a worker joining the running job reads it, since the job's
// other workers started from that checkpoint's record and its servers count steps from there.
std::string RunStartPath() { return FLAGS_model_prefix + "-run.json"; }

Status WriteRunStart(const DataPosition& start) {
  nlohmann::json j = {{"epoch", start.epoch}, {"batch", start.batch}, {"step", start.step}};
  auto it = start.info.find("membership");
  if (it != start.info.end()) j["membership"] = it->second;
  return WriteFileAtomically(RunStartPath(), [&](std::ostream& out) { out << j.dump() << "\n"; });
}

// A joiner's start: the job's run's (*from), or step 0 without --model-prefix (a job without
// one cannot have been resumed: --resume needs it).
Status ReadRunStart(int rank, int64_t first, DataPosition* from) {
  if (FLAGS_model_prefix.empty()) return Status::Ok();
  const std::string path = RunStartPath();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return Status::InvalidArgument(path + ": cannot read it (worker 0 writes it at the start of an --elastic run "
                                   "with --model-prefix): worker " + std::to_string(rank) +
                                   " cannot know where the job's data cut started");
  }
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto count = [&](const char* k) { return j.is_object() && j.contains(k) && j[k].is_number_unsigned(); };
  if (!count("epoch") || !count("batch") || !count("step") || j["batch"].get<int64_t>() > j["step"].get<int64_t>() ||
      (j.contains("membership") && !j["membership"].is_string())) {
    return Status::InvalidArgument(path + ": not an object of non-negative epoch, batch <= step (and a "
                                   "membership string)");
  }
  from->epoch = j["epoch"].get<int64_t>();
  from->batch = j["batch"].get<int64_t>();
  from->step = j["step"].get<int64_t>();
  if (j.contains("membership")) from->info["membership"] = j["membership"].get<std::string>();
  std::printf("tally train: worker %d follows the job's data cut from %s: the job's run started at epoch %lld, "
              "batch %lld, step %lld; this worker's first step is the job's step %lld\n", rank, path.c_str(),
              static_cast<long long>(from->epoch), static_cast<long long>(from->batch),
              static_cast<long long>(from->step), static_cast<long long>(from->step + first));
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace

DataPosition DataPositionOf(const Checkpoint& resume, Trainer* trainer) {
  DataPosition p;
  p.epoch = resume.epoch;
  p.batch = resume.batch;
  p.step = resume.step;
  p.info = resume.info;
  p.kv = trainer != nullptr ? &trainer->kvstore() : nullptr;
  return p;
}

Status AddElasticCheckpointInfo(int64_t step, std::map<std::string, std::string>* info) {
  return g_source != nullptr ? g_source->AddInfo(step, info) : Status::Ok();
}

Status MakeElasticSource(int rank, int workers, int64_t examples, int batch_size, const DataPosition& job_start,
                         ExampleReadFn read, std::unique_ptr<BatchSource>* out) {
  DataPosition start = job_start;
  const int64_t first = start.kv != nullptr ? start.kv->membership_view()->first_step() : 0;
  if (first > 0) {  // a joiner: from where the job's run started, its steps counted from there
    TALLY_RETURN_IF_ERROR(ReadRunStart(rank, first, &start));
  } else if (rank == 0 && !FLAGS_model_prefix.empty()) {
    TALLY_RETURN_IF_ERROR(WriteRunStart(start));
  }
  ElasticStart es;
  es.epoch = start.epoch;
  es.batch = start.batch;
  es.step = start.step;
  es.gathered = AllRanks(workers);
  auto it = start.info.find("membership");
  if (it != start.info.end()) {
    TALLY_RETURN_IF_ERROR(ElasticRecord::FromJson("the checkpoint", it->second, &es.record));
    if (es.record.num_examples != examples) {
      return Status::InvalidArgument("the checkpoint's epoch has " + std::to_string(es.record.num_examples) +
                                     " examples, this run's " + std::to_string(examples) +
                                     " (the data set or --num-examples changed)");
    }
  } else if (es.batch > 0) {  // a checkpoint without membership: its job's workers, unchanged
    es.record.epoch_live = es.gathered;
  }
  ElasticReader::Options o;
  o.num_examples = examples;
  o.batch_size = batch_size;
  o.rank = rank;
  KVStore* kv = start.kv;
  if (kv != nullptr) {
    o.heard = [kv](std::vector<MembershipChange>* changes) {
      std::vector<MembershipView::Membership> heard;
      TALLY_RETURN_IF_ERROR(kv->membership_view()->HeardMembership(&heard));
      changes->clear();
      for (const MembershipView::Membership& m : heard) changes->push_back(MembershipChange{m.from_step, m.live, false});
      return Status::Ok();
    };
  }
  auto reader = std::make_unique<ElasticReader>(std::move(o));
  TALLY_RETURN_IF_ERROR(reader->Start(es));
  const int64_t lr_batches = ElasticShards::Batches(examples, workers, batch_size);
  out->reset(new ElasticSource(std::move(reader), rank, lr_batches, first > 0 ? start.step : 0, std::move(read)));
  return Status::Ok();
}

}  // namespace tally
