// GpuLoader on nvJPEG (data/gpu_loader.h). Three stages:
//   prep threads (config.loader.threads): read, unpack and plan each sample of a batch, ask
//     nvJPEG whether the GPU can decode it, and decode on the CPU the few it cannot;
//   N - 1 GPU threads, taking batches in turn: per batch, one batched nvJPEG decode into the
//     slot's image buffer, uploads of the CPU-decoded images, then the augmentation kernel
//     into the slot's output, all on the slot's stream;
//   NextBatch: hands the slot out, ordered on the device's stream by events.
// N slots (GpuLoaderConfig::buffers); batch seq uses slot seq % N. A GPU thread starts batch
// seq only once NextBatch(seq - N + 1) has recorded the release of slot seq % N (the end of
// batch seq - N's use), since waiting on an event not yet recorded would not wait at all.
// With N = 3, two threads decode the two batches after the one in use side by side: on an
// H100 busy with training one nvjpegDecodeBatched call took as long as a training step.
#include <nvjpeg.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <glog/logging.h>

#include "data/gpu/augment_kernel.h"
#include "data/gpu/nvjpeg_batch.h"
#include "data/gpu_loader.h"
#include "data/shard.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"

namespace tally {
namespace {

constexpr int kMaxSlots = 4;

class NvjpegLoader : public GpuLoader {
 public:
  NvjpegLoader(const GpuLoaderConfig& config, std::unique_ptr<RecordReader> reader)
      : config_(config), reader_(std::move(reader)), augmenter_(config.loader.augment),
        slots_(config.buffers), host_slots_(std::max(config.loader.prefetch, config.buffers)),
        perms_(static_cast<uint32_t>(reader_->num_indexed()), config.loader.shuffle, config.loader.seed, /*keep=*/3) {}
  ~NvjpegLoader() override;
  Status Start(const PartSizes& sizes);

  Status NextBatch(Batch* batch) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  GpuLoaderStats stats() const override;
  std::string decoder() const override { return decoder_->hardware() ? "hardware" : "gpu-hybrid"; }

 private:
  struct HostSlot {
    HostBatch batch;
    int64_t seq = -1;  // the batch it holds
    bool ready = false;
  };
  void PrepLoop();
  // GPU thread t of T decodes batches t, t + T, t + 2T, ...
  void GpuLoop(int t, int T);
  // Marks batch seq as taken from the host slots (under mu_), freeing its slot once every
  // batch before it has been taken too.
  void TookHostBatch(int64_t seq);
  Status Prepare(int64_t seq, HostBatch* batch, NvjpegProbe* probe);
  // Fills *sample from part position k, skipping bad records (from try `first_try` on).
  Status PrepareSample(int64_t epoch, int64_t k, int64_t first_try, bool cpu_decode, NvjpegProbe* probe,
                       HostSample* sample);
  Status NoteBadRecord(int64_t epoch, int64_t record, const Status& why);
  void Fail(const Status& s);

  const GpuLoaderConfig config_;
  const std::unique_ptr<RecordReader> reader_;
  const Augmenter augmenter_;
  int64_t per_part_ = 0, batches_per_epoch_ = 0, max_bad_ = 0;
  std::unique_ptr<NvjpegBatchDecoder> decoder_;
  cudaStream_t consumer_ = nullptr;  // the device's stream, where the batches are used
  const int slots_;
  cudaEvent_t released_[kMaxSlots] = {};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<HostSlot> host_slots_;   // GUARDED_BY(mu_); batch seq in seq % size
  int64_t next_claim_ = 0;             // GUARDED_BY(mu_): next batch for a prep thread
  int64_t next_host_take_ = 0;         // GUARDED_BY(mu_): the first batch no GPU thread has taken
  std::set<int64_t> taken_ahead_;      // GUARDED_BY(mu_): batches taken after it
  int64_t queued_[kMaxSlots] = {-1, -1, -1, -1};  // GUARDED_BY(mu_): batch queued in each slot
  HostBatch meta_[kMaxSlots];          // GUARDED_BY(mu_): its labels, epoch, index, pad
  int64_t consumer_wait_us_ = 0, prep_wait_us_ = 0, buffer_wait_us_ = 0;  // GUARDED_BY(mu_)
  int64_t next_deliver_ = 0;           // GUARDED_BY(mu_)
  bool stop_ = false;                  // GUARDED_BY(mu_)
  Status error_;                       // GUARDED_BY(mu_)
  BadRecords bad_;
  PermutationCache perms_;  // the last three epochs' (the prep threads run ahead of the GPU thread)
  std::vector<std::thread> threads_;
};

NvjpegLoader::~NvjpegLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  // The decoder waits for its own stream; the events may still be waited on by the consumer's.
  decoder_.reset();
  for (cudaEvent_t e : released_) {
    if (e != nullptr) TALLY_CUDA_CHECK(cudaEventDestroy(e));
  }
}

Status NvjpegLoader::Start(const PartSizes& sizes) {
  const LoaderConfig& c = config_.loader;
  per_part_ = sizes.per_part;
  batches_per_epoch_ = sizes.batches_per_epoch;
  max_bad_ = sizes.max_bad;
  const Device device{Device::Kind::kCuda, config_.device};
  consumer_ = cuda::Context(device).stream;  // also makes config_.device this thread's device
  for (int i = 0; i < slots_; ++i) TALLY_CUDA_CHECK(cudaEventCreateWithFlags(&released_[i], cudaEventDisableTiming));
  TALLY_RETURN_IF_ERROR(NvjpegBatchDecoder::Create(config_, &decoder_));
  // Named, so that stacks and `top -H` tell the stages apart.
  for (int t = 0; t < c.threads; ++t) {
    threads_.emplace_back([this] { PrepLoop(); });
    pthread_setname_np(threads_.back().native_handle(), ("gpu-prep-" + std::to_string(t)).c_str());
  }
  // One GPU thread a buffer decoded ahead: nvjpegDecodeBatched waits for its own work, which
  // on a GPU busy with training takes several times as long as on an idle one, so one thread
  // would decode at that latency; each thread's decodes run on its slots' streams.
  const GpuDecodeTuning& tuning = config_.tuning;
  const int gpu_threads = tuning.decode_threads > 0 ? tuning.decode_threads : tuning.shared_state ? 1 : slots_ - 1;
  for (int t = 0; t < gpu_threads; ++t) {
    threads_.emplace_back([this, t, gpu_threads] { GpuLoop(t, gpu_threads); });
    pthread_setname_np(threads_.back().native_handle(), ("gpu-decode-" + std::to_string(t)).c_str());
  }
  return Status::Ok();
}

GpuLoaderStats NvjpegLoader::stats() const {
  GpuLoaderStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.loader.samples = next_deliver_ * config_.loader.batch_size;
    s.loader.bad_records = bad_.distinct();
    s.consumer_wait_s = consumer_wait_us_ * 1e-6;
    s.prep_wait_s = prep_wait_us_ * 1e-6;
    s.buffer_wait_s = buffer_wait_us_ * 1e-6;
  }
  s.gpu_decoded = decoder_->gpu_decoded();
  s.cpu_decoded = decoder_->cpu_decoded();
  s.decode_s = decoder_->decode_seconds();
  s.nvjpeg_s = decoder_->nvjpeg_seconds();
  s.cuda_allocations = decoder_->cuda_allocations();
  return s;
}

void NvjpegLoader::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s;
  }
  cv_.notify_all();
}

Status NvjpegLoader::NextBatch(Batch* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  const int slot = static_cast<int>(next_deliver_ % slots_);
  {
    ElapsedMicros<int64_t> timer(&consumer_wait_us_);
    cv_.wait(lock, [&] { return queued_[slot] == next_deliver_ || !error_.ok(); });
  }
  if (queued_[slot] != next_deliver_) return error_;
  *batch = std::move(meta_[slot].meta);
  batch->images = decoder_->Output(slot);
  // The consumer's work on this batch runs after its kernels; its work on the previous batch
  // (queued before this call) must end before the GPU thread overwrites that slot.
  TALLY_CUDA_CHECK(cudaStreamWaitEvent(consumer_, decoder_->ReadyEvent(slot), 0));
  if (next_deliver_ > 0) TALLY_CUDA_CHECK(cudaEventRecord(released_[(slot + slots_ - 1) % slots_], consumer_));
  ++next_deliver_;
  lock.unlock();
  cv_.notify_all();
  return Status::Ok();
}

void NvjpegLoader::PrepLoop() {
  NvjpegProbe probe(*decoder_);
  for (;;) {
    int64_t seq = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !error_.ok() || next_claim_ < next_host_take_ + static_cast<int64_t>(host_slots_.size());
      });
      if (stop_ || !error_.ok()) return;
      seq = next_claim_++;
    }
    HostBatch batch;
    Status s = Prepare(seq, &batch, &probe);
    if (!s.ok()) return Fail(s);
    {
      std::lock_guard<std::mutex> lock(mu_);
      HostSlot& slot = host_slots_[seq % host_slots_.size()];
      slot.batch = std::move(batch);
      slot.seq = seq;
      slot.ready = true;
    }
    cv_.notify_all();
  }
}

void NvjpegLoader::TookHostBatch(int64_t seq) {
  if (seq != next_host_take_) {
    taken_ahead_.insert(seq);
    return;
  }
  ++next_host_take_;
  while (!taken_ahead_.empty() && *taken_ahead_.begin() == next_host_take_) {
    taken_ahead_.erase(taken_ahead_.begin());
    ++next_host_take_;
  }
}

void NvjpegLoader::GpuLoop(int t, int T) {
  TALLY_CUDA_CHECK(cudaSetDevice(config_.device));
  NvjpegProbe probe(*decoder_);
  for (int64_t seq = t;; seq += T) {
    HostBatch batch;
    const int slot = static_cast<int>(seq % slots_);
    {
      std::unique_lock<std::mutex> lock(mu_);
      HostSlot& hs = host_slots_[seq % host_slots_.size()];
      // Batch seq reuses the slot of batch seq - N, whose release is recorded on the
      // consumer's stream by NextBatch(seq - N + 1): until that call, the event still marks an
      // older batch, and waiting on it would overwrite seq - N while it is being used.
      auto stopped = [&] { return stop_ || !error_.ok(); };
      {
        ElapsedMicros<int64_t> timer(&prep_wait_us_);
        cv_.wait(lock, [&] { return stopped() || (hs.ready && hs.seq == seq); });
      }
      {
        ElapsedMicros<int64_t> timer(&buffer_wait_us_);
        cv_.wait(lock, [&] { return stopped() || seq < slots_ || next_deliver_ >= seq - slots_ + 2; });
      }
      if (stopped()) return;
      batch = std::move(hs.batch);
      hs.ready = false;
      TookHostBatch(seq);
    }
    cv_.notify_all();
    // A sample nvJPEG fails on is decoded on the CPU; one neither can read is replaced.
    auto replace = [&](int j, const Status& why) -> Status {
      HostSample& sample = batch.samples[j];
      TALLY_RETURN_IF_ERROR(NoteBadRecord(batch.meta.epoch, sample.record, why));
      TALLY_RETURN_IF_ERROR(PrepareSample(batch.meta.epoch, sample.part_position, sample.tries + 1,
                                          /*cpu_decode=*/true, &probe, &sample));
      batch.meta.labels.data<int32_t>()[j] = sample.label;
      return Status::Ok();
    };
    Status s = decoder_->Decode(slot, seq >= slots_ ? released_[slot] : nullptr, &batch, replace);
    if (!s.ok()) return Fail(s);
    {
      std::lock_guard<std::mutex> lock(mu_);
      meta_[slot] = std::move(batch);
      queued_[slot] = seq;
    }
    cv_.notify_all();
  }
}

Status NvjpegLoader::Prepare(int64_t seq, HostBatch* batch, NvjpegProbe* probe) {
  const int bs = config_.loader.batch_size;
  const LoaderConfig& lc = config_.loader;
  // --elastic: the batch is the plan's (its positions in the epoch's permutation), as Loader's.
  ShardBatch planned;
  const BatchPosition at = LoaderBatchAt(lc, seq, batches_per_epoch_, &planned);
  batch->meta.epoch = at.epoch;
  batch->meta.index = at.index;
  batch->meta.pad = lc.plan != nullptr ? planned.pad : 0;
  batch->meta.labels = Tensor::Empty({bs}, DType::kI32);
  batch->samples.resize(bs);
  const int64_t n = static_cast<int64_t>(reader_->num_indexed());
  const int64_t part_start = config_.loader.part_index * per_part_;
  for (int j = 0; j < bs; ++j) {
    const int64_t k = lc.plan != nullptr ? planned.positions[static_cast<size_t>(j)]
                                         : PartSlot(at.index * bs + j, per_part_, part_start, n, &batch->meta.pad);
    TALLY_RETURN_IF_ERROR(PrepareSample(at.epoch, k, 0, /*cpu_decode=*/false, probe, &batch->samples[j]));
    batch->meta.labels.data<int32_t>()[j] = batch->samples[j].label;
  }
  return Status::Ok();
}

Status NvjpegLoader::PrepareSample(int64_t epoch, int64_t k, int64_t first_try, bool cpu_decode, NvjpegProbe* probe,
                                   HostSample* sample) {
  const std::shared_ptr<const std::vector<uint32_t>> perm = perms_.Get(epoch);
  const int64_t part_start = config_.loader.part_index * per_part_;
  for (int64_t tries = first_try; tries < per_part_; ++tries) {
    // k: the sample's place in this worker's part, or (a plan) its position in the epoch.
    const int64_t record = config_.loader.plan != nullptr ? PlannedRecordAt(*perm, k, tries)
                                                          : RecordAt(*perm, part_start, k, tries, per_part_);
    Status s = LoadHostSample(*reader_, augmenter_, config_.loader.seed, epoch, record, cpu_decode, probe, sample);
    if (s.ok()) {
      sample->part_position = k;
      sample->tries = tries;
      return Status::Ok();
    }
    TALLY_RETURN_IF_ERROR(NoteBadRecord(epoch, record, s));
  }
  return Status::InvalidArgument("GPU loader: no readable record in part " + std::to_string(config_.loader.part_index));
}

Status NvjpegLoader::NoteBadRecord(int64_t epoch, int64_t record, const Status& why) {
  const int64_t in_epoch = bad_.Note(epoch, record, why);
  if (in_epoch > max_bad_) {
    return Status::InvalidArgument("GPU loader: " + std::to_string(in_epoch) + " bad records in epoch " +
                                   std::to_string(epoch) + " of part " + std::to_string(config_.loader.part_index) +
                                   ", above max_bad_fraction " + std::to_string(config_.loader.max_bad_fraction) +
                                   "; the last: " + why.message());
  }
  return Status::Ok();
}

}  // namespace

Status CreateNvjpegLoader(const GpuLoaderConfig& config, std::unique_ptr<GpuLoader>* out) {
  std::unique_ptr<RecordReader> reader;
  PartSizes sizes;
  TALLY_RETURN_IF_ERROR(OpenLoaderPack(config.loader, "GPU loader", &reader, &sizes));
  auto loader = std::make_unique<NvjpegLoader>(config, std::move(reader));
  TALLY_RETURN_IF_ERROR(loader->Start(sizes));
  *out = std::move(loader);
  return Status::Ok();
}

}  // namespace tally
