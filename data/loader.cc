#include "data/loader.h"

#include <algorithm>
#include <chrono>

#include <glog/logging.h>

#include "base/thread_name.h"
#include "data/shard.h"

namespace tally {

Status OpenLoaderPack(const LoaderConfig& c, const std::string& who, std::unique_ptr<RecordReader>* reader,
                      PartSizes* sizes) {
  if (c.batch_size <= 0) return Status::InvalidArgument(who + ": batch_size must be positive");
  if (c.num_parts <= 0 || c.part_index < 0 || c.part_index >= c.num_parts) {
    return Status::InvalidArgument(who + ": part_index " + std::to_string(c.part_index) + " is not in [0, " +
                                   std::to_string(c.num_parts) + ")");
  }
  if (c.threads <= 0 || c.prefetch <= 0) return Status::InvalidArgument(who + ": threads and prefetch must be positive");
  if (c.label_width <= 0) return Status::InvalidArgument(who + ": label_width must be positive");
  TALLY_RETURN_IF_ERROR(RecordReader::Open(c.rec_path, c.idx_path, reader));
  if (c.idx_path.empty()) {
    // As MXNet's ImageRecordIter reads a bare .rec: the records are found by reading the
    // file through once, then shuffled and sharded by position as with an index.
    const auto t0 = std::chrono::steady_clock::now();
    TALLY_RETURN_IF_ERROR((*reader)->IndexByScanning());
    LOG(INFO) << who << ": " << c.rec_path << " has no .idx: found its " << (*reader)->num_indexed()
              << " records by reading it through ("
              << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()
              << " ms); an index (tally im2rec writes one beside the .rec) makes this start at once";
  }
  const int64_t n = static_cast<int64_t>((*reader)->num_indexed());
  if (n == 0) {
    return Status::InvalidArgument(who + ": " + (c.idx_path.empty() ? c.rec_path + " holds" : c.idx_path + " lists") +
                                   " no records");
  }
  if (n > int64_t{UINT32_MAX}) return Status::InvalidArgument(who + ": more than 2^32 records in " + c.idx_path);
  *sizes = PartSizesOf(n, c.num_parts, c.batch_size, c.round_batch, c.max_bad_fraction);
  if (sizes->batches_per_epoch == 0) {
    return Status::InvalidArgument(who + ": " + std::to_string(n) + " records make no full batch of " +
                                   std::to_string(c.batch_size) + " for each of " + std::to_string(c.num_parts) +
                                   " parts (set round_batch to pad)");
  }
  return Status::Ok();
}

Status Loader::Create(const LoaderConfig& config, std::unique_ptr<Loader>* out) {
  std::unique_ptr<RecordReader> reader;
  PartSizes sizes;
  TALLY_RETURN_IF_ERROR(OpenLoaderPack(config, "loader", &reader, &sizes));
  out->reset(new Loader(config, std::move(reader)));
  Loader& l = **out;
  l.per_part_ = sizes.per_part;
  l.batches_per_epoch_ = sizes.batches_per_epoch;
  l.max_bad_ = sizes.max_bad;
  for (int t = 0; t < config.threads; ++t) l.threads_.emplace_back([&l, t] {
    NameThisThread("tally-load-" + std::to_string(t));
    l.Run();
  });
  return Status::Ok();
}

Loader::Loader(const LoaderConfig& config, std::unique_ptr<RecordReader> reader)
    : config_(config), reader_(std::move(reader)), augmenter_(config.augment), slots_(config.prefetch),
      perms_(static_cast<uint32_t>(reader_->num_indexed()), config.shuffle, config.seed, /*keep=*/2) {}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

LoaderStats Loader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LoaderStats{samples_, bad_.distinct()};
}

Status Loader::NextBatch(Batch* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  Slot& slot = slots_[next_deliver_ % slots_.size()];
  cv_.wait(lock, [&] { return slot.ready || !error_.ok(); });
  if (!slot.ready) return error_;
  *batch = std::move(slot.batch);
  slot.batch = Batch();
  slot.ready = false;
  ++next_deliver_;
  samples_ += config_.batch_size;
  lock.unlock();
  cv_.notify_all();
  return Status::Ok();
}

void Loader::Run() {
  for (;;) {
    int64_t seq = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !error_.ok() || next_claim_ < next_deliver_ + static_cast<int64_t>(slots_.size());
      });
      if (stop_ || !error_.ok()) return;
      seq = next_claim_++;
    }
    Batch batch;
    Status s = Produce(seq, &batch);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok()) {
        if (error_.ok()) error_ = s;
      } else {
        Slot& slot = slots_[seq % slots_.size()];
        slot.batch = std::move(batch);
        slot.ready = true;
      }
    }
    cv_.notify_all();
    if (!s.ok()) return;
  }
}


BatchPosition LoaderBatchAt(const LoaderConfig& c, int64_t seq, int64_t batches_per_epoch, ShardBatch* planned) {
  BatchPosition at;
  if (c.plan != nullptr) {
    *planned = c.plan->At(c.plan_first_step + seq, &at.epoch, &at.index);
  } else {
    at = PositionOf(seq, c.first_epoch, c.first_batch, batches_per_epoch);
  }
  return at;
}

Status Loader::Produce(int64_t seq, Batch* batch) {
  const int bs = config_.batch_size;
  const AugmentParams& ap = augmenter_.params();
  const DType dtype = config_.output == OutputType::kF32   ? DType::kF32
                      : config_.output == OutputType::kF16 ? DType::kF16
                                                           : DType::kU8;
  ShardBatch planned;
  const BatchPosition at = LoaderBatchAt(config_, seq, batches_per_epoch_, &planned);
  batch->epoch = at.epoch;
  batch->index = at.index;
  batch->images = Tensor::Empty({bs, ap.data_h, ap.data_w, 3}, dtype);
  batch->labels = Tensor::Empty({bs}, DType::kI32);
  if (config_.label_width > 1) batch->label_matrix = Tensor::Empty({bs, config_.label_width}, DType::kF32);
  batch->pad = config_.plan != nullptr ? planned.pad : 0;

  std::shared_ptr<const std::vector<uint32_t>> perm = perms_.Get(batch->epoch);
  const int64_t n = static_cast<int64_t>(perm->size());
  const int64_t part_start = config_.part_index * per_part_;
  auto* images = static_cast<uint8_t*>(batch->images.raw_data());
  const size_t sample_bytes = augmenter_.SampleBytes(config_.output);
  std::vector<float> labels(config_.label_width);
  for (int j = 0; j < bs; ++j) {
    int64_t k = 0;
    if (config_.plan == nullptr) k = PartSlot(batch->index * bs + j, per_part_, part_start, n, &batch->pad);
    Status s;
    for (int64_t tries = 0; tries < per_part_; ++tries) {
      const int64_t record = config_.plan != nullptr ? PlannedRecordAt(*perm, planned.positions[j], tries)
                                                     : RecordAt(*perm, part_start, k, tries, per_part_);
      s = LoadSample(batch->epoch, record, images + j * sample_bytes, labels.data());
      if (s.ok()) break;
      TALLY_RETURN_IF_ERROR(NoteBadRecord(batch->epoch, record, s));
    }
    if (!s.ok()) return Status::InvalidArgument("loader: no readable record in part " + std::to_string(config_.part_index));
    batch->labels.data<int32_t>()[j] = static_cast<int32_t>(labels[0]);
    if (config_.label_width > 1) {
      std::copy(labels.begin(), labels.end(), batch->label_matrix.data<float>() + j * config_.label_width);
    }
  }
  return Status::Ok();
}

Status Loader::LoadSample(int64_t epoch, int64_t record, void* out, float* labels) const {
  thread_local std::string payload;
  thread_local Image image;
  TALLY_RETURN_IF_ERROR(reader_->ReadIndexed(static_cast<size_t>(record), &payload));
  auto where = [&] {
    return reader_->path() + ": record " + std::to_string(record) + " at byte offset " +
           std::to_string(reader_->index()[record].offset) + ": ";
  };
  ImageRecordHeader header;
  std::string_view bytes;
  Status s = UnpackImageRecord(payload, &header, &bytes);
  if (!s.ok()) return Status::InvalidArgument(where() + s.message());
  std::vector<float> all = header.AllLabels();
  if (static_cast<int>(all.size()) < config_.label_width) {
    return Status::InvalidArgument(where() + std::to_string(all.size()) + " labels, label_width is " +
                                   std::to_string(config_.label_width));
  }
  std::copy_n(all.begin(), config_.label_width, labels);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  ImageInfo info;
  s = ReadImageInfo(data, bytes.size(), &info);
  if (!s.ok()) return Status::InvalidArgument(where() + s.message());
  Rng rng(AugmentSeed(config_.seed, epoch, record));
  AugmentPlan plan = augmenter_.Plan(info.width, info.height, &rng);
  s = DecodeImage(data, bytes.size(), augmenter_.DecodeOptionsFor(plan, info.width, info.height), &image);
  if (!s.ok()) return Status::InvalidArgument(where() + s.message());
  augmenter_.Apply(image, plan, info.width, info.height, config_.output, out);
  return Status::Ok();
}

Status Loader::NoteBadRecord(int64_t epoch, int64_t record, const Status& why) {
  const int64_t in_epoch = bad_.Note(epoch, record, why);
  if (in_epoch > max_bad_) {
    return Status::InvalidArgument(
        "loader: " + std::to_string(in_epoch) + " bad records in epoch " + std::to_string(epoch) + " of part " +
        std::to_string(config_.part_index) + " (" + std::to_string(per_part_) + " records), above max_bad_fraction " +
        std::to_string(config_.max_bad_fraction) + "; the last: " + why.message());
  }
  return Status::Ok();
}

}  // namespace tally
