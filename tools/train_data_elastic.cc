// `tally train --elastic`'s training source: the step-by-step cut of data/elastic_reader.h
// behind BatchSource (train_data.h), the test hook that logs what each worker read, and the
// data position a checkpoint records.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "base/fault_hooks.h"
#include "tools/train_data.h"

namespace tally {
namespace {

class ElasticSource;
// The process's elastic training source, for its checkpoints (one training source a process).
ElasticSource* g_source = nullptr;

class ElasticSource : public BatchSource {
 public:
  ElasticSource(std::unique_ptr<ElasticReader> reader, int rank, int64_t lr_batches, ExampleReadFn read)
      : reader_(std::move(reader)), rank_(rank), lr_batches_(lr_batches), read_(std::move(read)) {
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
    TALLY_RETURN_IF_ERROR(reader_->Place(step, settle, &at_));
    step_ = step;
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

Status MakeElasticSource(int rank, int workers, int64_t examples, int batch_size, const DataPosition& start,
                         ExampleReadFn read, std::unique_ptr<BatchSource>* out) {
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
  } else if (start.batch > 0) {  // a checkpoint without membership: its job's workers, unchanged
    es.record.epoch_live = es.gathered;
  }
  ElasticReader::Options o;
  o.num_examples = examples;
  o.batch_size = batch_size;
  o.rank = rank;
  KVStore* kv = start.kv;
  if (kv != nullptr) {
    o.heard = [kv](std::vector<MembershipChange>* changes) {
      std::vector<KVStore::Membership> heard;
      TALLY_RETURN_IF_ERROR(kv->HeardMembership(&heard));
      changes->clear();
      for (const KVStore::Membership& m : heard) changes->push_back(MembershipChange{m.from_step, m.live, false});
      return Status::Ok();
    };
  }
  auto reader = std::make_unique<ElasticReader>(std::move(o));
  TALLY_RETURN_IF_ERROR(reader->Start(es));
  const int64_t lr_batches = ElasticShards::Batches(examples, workers, batch_size);
  out->reset(new ElasticSource(std::move(reader), rank, lr_batches, std::move(read)));
  return Status::Ok();
}

}  // namespace tally
