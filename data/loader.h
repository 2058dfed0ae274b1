// The image data loader: MXNet ImageRecordIter's job. Reads a RecordIO pack through its
// .idx, shards it by record count, shuffles each epoch from a seed, decodes and augments on
// a pool of threads, and hands out whole NHWC batches from a bounded prefetch queue.
//
//   LoaderConfig cfg;
//   cfg.rec_path = "train.rec";  cfg.idx_path = "train.idx";
//   cfg.batch_size = 32;  cfg.num_parts = num_workers;  cfg.part_index = rank;
//   cfg.augment = AugmentParams::ImageNetTrain();
//   std::unique_ptr<Loader> loader;
//   TALLY_RETURN_IF_ERROR(Loader::Create(cfg, &loader));
//   for (int64_t b = 0; b < loader->batches_per_epoch(); ++b) {
//     Batch batch;
//     TALLY_RETURN_IF_ERROR(loader->NextBatch(&batch));   // images [32,224,224,3] f32
//     ...
//   }
//
// Sharding (every part gets the same number of batches, so dist_sync never waits on a
// worker that ran out of data). Each epoch, every part computes the same permutation of the
// N records (identity without shuffle; otherwise a function of seed and epoch only), and
// part i takes positions [i*P, (i+1)*P) of it:
//   round_batch (default, MXNet's default too): P = ceil(N / parts) and positions past N
//     wrap to the permutation's start; the part's last batch is completed by wrapping to the
//     part's first records. Every record is read at least once per epoch across the parts;
//     Batch::pad counts the repeated samples at the batch's end (MXNet's DataBatch.pad).
//   !round_batch: P = floor(N / parts) and the last partial batch is dropped; the (up to
//     parts - 1 + parts * (batch_size - 1)) records left out change from epoch to epoch
//     when shuffling.
// Batches come out in order: epoch after epoch with no gap (Batch::epoch says which), and
// the same (seed, part) give the same batches whatever the number of threads.
//
// Bad data: a record that fails to read, unpack or decode is logged (record index, byte
// offset, why), counted, and replaced in its batch by the next good record of the part.
// When the distinct bad records met in one epoch exceed max_bad_fraction of the part's
// records, NextBatch fails with a Status saying so; a file that cannot be opened fails Create.
//
// Thread-safety: NextBatch is called by one thread at a time (the training loop). The
// destructor stops and joins the decode threads, also while NextBatch would block.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/augment.h"
#include "data/elastic_shard.h"
#include "data/recordio.h"
#include "data/shard.h"
#include "base/tensor.h"

namespace tally {

struct LoaderConfig {
  std::string rec_path, idx_path;  // no .idx (empty): the .rec is read through once to find its records
  int batch_size = 32;
  int num_parts = 1, part_index = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t first_epoch = 0;  // resume: start from this epoch's permutation and seeds
  int64_t first_batch = 0;  // resume: ... at this batch of it
  bool round_batch = true;
  int threads = 4;          // MXNet's preprocess_threads
  int prefetch = 4;         // batches decoded ahead (MXNet's prefetch_buffer)
  OutputType output = OutputType::kF32;
  AugmentParams augment;
  int label_width = 1;      // > 1: Batch::label_matrix holds every label
  double max_bad_fraction = 0.01;
  // --elastic (data/elastic_shard.h): batch number seq is the forecast's batch of step
  // plan_first_step + seq, its positions mapped through the epoch's permutation, instead of
  // the part's (num_parts and part_index then size the bad-record allowance only). A bad
  // record is replaced by the next one in the epoch's order.
  std::shared_ptr<const ElasticShards::Forecast> plan;
  int64_t plan_first_step = 0;
};

struct Batch {
  Tensor images;        // [B, H, W, 3]: f32 or f16 (normalised) or u8
  Tensor labels;        // int32 [B]: the first label of each record
  Tensor label_matrix;  // f32 [B, label_width] when label_width > 1
  int64_t epoch = 0;
  int64_t index = 0;    // within the epoch
  int pad = 0;          // trailing samples that repeat records (round_batch)
};

struct LoaderStats {
  int64_t samples = 0;       // decoded and delivered
  int64_t bad_records = 0;   // distinct records that failed
};

// The checks Loader::Create makes on c's settings, then opening its pack, which must give
// every part at least one batch; *sizes says how it is cut. Shared with GpuLoader
// (data/gpu_loader.h). Messages begin with `who`.
Status OpenLoaderPack(const LoaderConfig& c, const std::string& who, std::unique_ptr<RecordReader>* reader,
                      PartSizes* sizes);

// Where batch number seq of a loader made from c lies: with c.plan, the forecast's batch of
// step plan_first_step + seq (its positions into *planned); else the part's, counted from
// first_epoch and first_batch (*planned left empty). Shared with GpuLoader.
BatchPosition LoaderBatchAt(const LoaderConfig& c, int64_t seq, int64_t batches_per_epoch, ShardBatch* planned);

class Loader {
 public:
  static Status Create(const LoaderConfig& config, std::unique_ptr<Loader>* out);
  ~Loader();

  // Blocks until the next batch is ready. After a failure every later call fails too.
  Status NextBatch(Batch* batch);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t records_per_part() const { return per_part_; }
  int64_t num_records() const { return static_cast<int64_t>(reader_->num_indexed()); }
  LoaderStats stats() const;

 private:
  struct Slot {
    Batch batch;
    bool ready = false;
  };
  Loader(const LoaderConfig& config, std::unique_ptr<RecordReader> reader);
  void Run();
  // Fills batch number `seq` (counted from the first epoch) into *batch.
  Status Produce(int64_t seq, Batch* batch);
  // Decodes and augments record `record` into `out`; Ok, or the reason it is bad.
  Status LoadSample(int64_t epoch, int64_t record, void* out, float* labels) const;
  // Counts a bad record; fails once the epoch's bad records exceed the allowed fraction.
  Status NoteBadRecord(int64_t epoch, int64_t record, const Status& why);

  const LoaderConfig config_;
  const std::unique_ptr<RecordReader> reader_;
  const Augmenter augmenter_;
  int64_t per_part_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t max_bad_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;            // GUARDED_BY(mu_); batch seq lives in slot seq % size
  int64_t next_claim_ = 0;             // GUARDED_BY(mu_)
  int64_t next_deliver_ = 0;           // GUARDED_BY(mu_)
  bool stop_ = false;                  // GUARDED_BY(mu_)
  Status error_;                       // GUARDED_BY(mu_)
  int64_t samples_ = 0;                // GUARDED_BY(mu_)
  BadRecords bad_;
  PermutationCache perms_;             // the last two epochs' (two are worked on at a boundary)
  std::vector<std::thread> threads_;
};

}  // namespace tally
