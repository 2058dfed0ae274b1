#include "tools/train_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <gflags/gflags.h>

#include "data/gpu_loader.h"
#include "data/loader.h"
#include "data/synthetic_data.h"
#include "tools/train_elastic.h"

DEFINE_string(data_train, "", "training RecordIO pack (.rec); empty: synthetic data");
DEFINE_string(data_train_idx, "", "its index (.idx); default: the .rec's name with .idx, if there is one (without, the .rec is read through once to find its records)");
DEFINE_string(data_val, "", "validation RecordIO pack (.rec)");
DEFINE_string(data_val_idx, "", "its index (.idx); default: the .rec's name with .idx, if there is one");
DEFINE_int32(data_nthreads, 4, "decoding threads per loader");
DEFINE_int32(gpu_decode, 1,
             "with one GPU per process and --data-train: 1 decodes and augments the training JPEGs on "
             "the GPU (nvJPEG) where this build has it, else on the CPU; 0: on the CPU");
DEFINE_string(gpu_decoder, "hardware",
              "--gpu-decode 1: hardware (nvJPEG's JPEG engines where the GPU has them, e.g. A100/H100) or "
              "cuda (nvJPEG on the GPU's cores, beside the training step)");
DEFINE_int32(gpu_decode_buffers, 3,
             "--gpu-decode 1: output buffers on the GPU, 2 to 4 (the batch in use and those decoded ahead)");
DEFINE_string(gpu_decode_tuning, "default",
              "--gpu-decode 1: how the loader drives nvJPEG, for measuring (docs/gpu.md, \"Decoding beside the "
              "step\"): default, standalone, or settings such as shared-handle,threads=1,pinned-input");
DEFINE_string(rgb_mean, "123.68,116.779,103.939", "mean subtracted from R,G,B");
DEFINE_string(rgb_std, "1,1,1", "R,G,B are divided by this after the mean");
DEFINE_int32(random_mirror, 1, "1: flip training images left-right at random");
DEFINE_int32(random_crop, 0, "1: crop training images at a random place (rand_crop)");
DEFINE_int32(random_resized_crop, 0, "1: random-resized crop of training images");
DEFINE_double(min_random_area, 1.0, "random-resized crop: smallest area fraction");
DEFINE_double(max_random_area, 1.0, "random-resized crop: largest area fraction");
DEFINE_double(min_random_aspect_ratio, 1.0, "random-resized crop: smallest aspect ratio");
DEFINE_double(max_random_aspect_ratio, 1.0, "random-resized crop: largest aspect ratio");
DEFINE_double(brightness, 0, "brightness jitter");
DEFINE_double(contrast, 0, "contrast jitter");
DEFINE_double(saturation, 0, "saturation jitter");
DEFINE_double(pca_noise, 0, "PCA lighting noise");
DEFINE_int32(num_examples, 5120, "synthetic training examples per epoch (ignored with --data-train)");
DEFINE_int32(num_val_examples, 1024, "synthetic validation examples after each epoch (rounded up to whole batches)");
DECLARE_int32(batch_size);
DECLARE_int32(benchmark);
DECLARE_uint64(seed);

namespace tally {
namespace {

Status ParseTriple(const char* flag, const std::string& text, float out[3]) {
  std::stringstream ss(text);
  std::string part;
  int n = 0;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    float v = std::strtof(part.c_str(), &end);
    if (n >= 3 || part.empty() || *end != '\0') break;
    out[n++] = v;
  }
  if (n != 3 || ss.rdbuf()->in_avail() > 0) {
    return Status::InvalidArgument(std::string(flag) + " '" + text + "' must be three numbers R,G,B");
  }
  return Status::Ok();
}

Status FileFlag(const char* flag, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::NotFound(std::string(flag) + ": no file " + path);
  return Status::Ok();
}

// The .idx a pack is read through: the flag's, else the one beside the .rec, else none
// (empty: the loader finds the records by reading the .rec through).
std::string IdxFor(const std::string& rec, const std::string& idx) {
  if (!idx.empty()) return idx;
  size_t dot = rec.rfind('.');
  const std::string beside = (dot == std::string::npos ? rec : rec.substr(0, dot)) + ".idx";
  struct stat st;
  return stat(beside.c_str(), &st) == 0 ? beside : std::string();
}

class SyntheticSource : public BatchSource {
 public:
  // Batch number `position` of the stream comes first; validation (cycle) restarts the
  // stream every epoch, so every epoch validates on the same images.
  SyntheticSource(const TrainerConfig& cfg, uint64_t stream, int64_t batches, int batch, bool reuse,
                  int64_t position, bool cycle)
      : data_(cfg.model.image_shape, cfg.model.num_classes, FLAGS_seed, stream),
        batches_(batches), batch_(batch), reuse_(reuse), position_(position), cycle_(cycle) {}
  Status Next(Tensor* images, Tensor* labels) override {
    if (!reuse_ || !images_.defined()) {
      data_.Seek(static_cast<uint64_t>(cycle_ ? position_ % batches_ : position_));
      ++position_;
      data_.NextBatch(batch_, &images_, &labels_);
    }
    *images = images_;
    *labels = labels_;
    return Status::Ok();
  }
  int64_t batches_per_epoch() const override { return batches_; }

 private:
  SyntheticData data_;
  int64_t batches_;
  int batch_;
  bool reuse_;  // --benchmark 1: one batch, over and over
  int64_t position_;
  bool cycle_;
  Tensor images_, labels_;
};

// Every one of the first `rows` labels must name a class of the model.
Status CheckLabels(const Tensor& labels, int64_t rows, int num_classes) {
  const int32_t* l = labels.data<int32_t>();
  for (int64_t i = 0; i < rows; ++i) {
    if (l[i] < 0 || l[i] >= num_classes) {
      return Status::InvalidArgument("a record has label " + std::to_string(l[i]) + ", outside --num-classes " +
                                     std::to_string(num_classes));
    }
  }
  return Status::Ok();
}

class RecordSource : public BatchSource {
 public:
  RecordSource(std::unique_ptr<Loader> loader, int num_classes, bool drop_pad)
      : loader_(std::move(loader)), num_classes_(num_classes), drop_pad_(drop_pad) {}
  Status Next(Tensor* images, Tensor* labels) override {
    Batch b;
    TALLY_RETURN_IF_ERROR(loader_->NextBatch(&b));
    const int64_t rows = b.images.dim(0) - (drop_pad_ ? b.pad : 0);
    TALLY_RETURN_IF_ERROR(CheckLabels(b.labels, rows, num_classes_));
    *images = b.images.Slice(0, rows);
    *labels = b.labels.Slice(0, rows);
    return Status::Ok();
  }
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }

 private:
  std::unique_ptr<Loader> loader_;
  int num_classes_;
  bool drop_pad_;
};

// The loader's settings for a pack, from the flags; fails naming the flag.
Status LoaderConfigFor(const TrainerConfig& cfg, const std::string& rec, const std::string& idx, bool train,
                       int rank, int workers, const DataPosition& start, LoaderConfig* out) {
  const char* flag = train ? "--data-train" : "--data-val";
  TALLY_RETURN_IF_ERROR(FileFlag(flag, rec));
  if (!idx.empty()) TALLY_RETURN_IF_ERROR(FileFlag(train ? "--data-train-idx" : "--data-val-idx", idx));
  if (cfg.model.image_shape[0] != 3) {
    return Status::InvalidArgument("--image-shape: RecordIO images are decoded to 3 channels");
  }
  LoaderConfig& lc = *out;
  lc.rec_path = rec;
  lc.idx_path = idx;
  lc.batch_size = FLAGS_batch_size;
  lc.num_parts = workers;
  lc.part_index = rank;
  lc.shuffle = train;
  lc.seed = FLAGS_seed;
  lc.first_epoch = start.epoch;
  lc.first_batch = start.batch;
  lc.threads = FLAGS_data_nthreads;
  AugmentParams& a = lc.augment;
  a.data_h = static_cast<int>(cfg.model.image_shape[1]);
  a.data_w = static_cast<int>(cfg.model.image_shape[2]);
  float mean[3], std[3];
  TALLY_RETURN_IF_ERROR(ParseTriple("--rgb-mean", FLAGS_rgb_mean, mean));
  TALLY_RETURN_IF_ERROR(ParseTriple("--rgb-std", FLAGS_rgb_std, std));
  a.mean_r = mean[0], a.mean_g = mean[1], a.mean_b = mean[2];
  a.std_r = std[0], a.std_g = std[1], a.std_b = std[2];
  if (train) {
    a.rand_mirror = FLAGS_random_mirror != 0;
    a.rand_crop = FLAGS_random_crop != 0;
    a.random_resized_crop = FLAGS_random_resized_crop != 0;
    a.min_random_area = static_cast<float>(FLAGS_min_random_area);
    a.max_random_area = static_cast<float>(FLAGS_max_random_area);
    a.min_aspect_ratio = static_cast<float>(FLAGS_min_random_aspect_ratio);
    a.max_aspect_ratio = static_cast<float>(FLAGS_max_random_aspect_ratio);
    a.brightness = static_cast<float>(FLAGS_brightness);
    a.contrast = static_cast<float>(FLAGS_contrast);
    a.saturation = static_cast<float>(FLAGS_saturation);
    a.pca_noise = static_cast<float>(FLAGS_pca_noise);
  }
  return Status::Ok();
}

Status LoaderFor(const TrainerConfig& cfg, const std::string& rec, const std::string& idx, bool train,
                 int rank, int workers, const DataPosition& start, std::unique_ptr<Loader>* out) {
  LoaderConfig lc;
  TALLY_RETURN_IF_ERROR(LoaderConfigFor(cfg, rec, idx, train, rank, workers, start, &lc));
  Status s = Loader::Create(lc, out);
  if (!s.ok()) return Status::InvalidArgument(std::string(train ? "--data-train: " : "--data-val: ") + s.message());
  return Status::Ok();
}

// The GPU loader's settings: lc's, on the trainer's GPU in its dtype and input channels.
Status GpuLoaderConfigFor(const TrainerConfig& cfg, const LoaderConfig& lc, GpuLoaderConfig* gc) {
  gc->loader = lc;
  gc->device = cfg.gpus[0];
  gc->dtype = cfg.dtype;
  gc->channels = StemInputChannels(cfg);
  gc->buffers = FLAGS_gpu_decode_buffers;
  gc->hardware_decoder = FLAGS_gpu_decoder == "hardware";
  return ParseGpuDecodeTuning(FLAGS_gpu_decode_tuning, &gc->tuning);
}

// Training batches decoded and augmented on the GPU (data/gpu_loader.h): images already
// on the trainer's GPU in its dtype and input channels, which Trainer::Step copies on the
// device; labels on the host.
class GpuRecordSource : public BatchSource {
 public:
  GpuRecordSource(std::unique_ptr<GpuLoader> loader, int num_classes)
      : loader_(std::move(loader)), num_classes_(num_classes) {}
  // Where the input path's time went: the answer when training waits for data.
  ~GpuRecordSource() override {
    std::printf("tally train: GPU input path: %s\n", DescribeGpuLoaderStats(loader_->stats()).c_str());
  }
  Status Next(Tensor* images, Tensor* labels) override {
    Batch b;
    TALLY_RETURN_IF_ERROR(loader_->NextBatch(&b));
    TALLY_RETURN_IF_ERROR(CheckLabels(b.labels, b.labels.dim(0), num_classes_));
    *images = b.images;
    *labels = b.labels;
    return Status::Ok();
  }
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }

 private:
  std::unique_ptr<GpuLoader> loader_;
  int num_classes_;
};

// Whether the training pack is decoded on the GPU: --gpu-decode 1 with one GPU in this
// process and a build with nvJPEG. Asked for explicitly where it cannot be, it is an error.
Status UseGpuDecode(const TrainerConfig& cfg, bool* use) {
  *use = false;
  if (FLAGS_gpu_decode_buffers < 2 || FLAGS_gpu_decode_buffers > 4) {
    return Status::InvalidArgument("--gpu-decode-buffers " + std::to_string(FLAGS_gpu_decode_buffers) +
                                   ": 2, 3 or 4");
  }
  if (FLAGS_gpu_decoder != "hardware" && FLAGS_gpu_decoder != "cuda") {
    return Status::InvalidArgument("--gpu-decoder " + FLAGS_gpu_decoder + ": hardware or cuda");
  }
  GpuDecodeTuning tuning;
  Status t = ParseGpuDecodeTuning(FLAGS_gpu_decode_tuning, &tuning);
  if (!t.ok()) return Status::InvalidArgument("--gpu-decode-tuning: " + t.message());
  if (tuning.decode_threads >= FLAGS_gpu_decode_buffers) {
    return Status::InvalidArgument("--gpu-decode-tuning " + FLAGS_gpu_decode_tuning + ": " +
                                   std::to_string(tuning.decode_threads) + " decode threads need more than " +
                                   "--gpu-decode-buffers " + std::to_string(FLAGS_gpu_decode_buffers));
  }
  if (FLAGS_gpu_decode == 0 || cfg.gpus.empty()) return Status::Ok();
  const bool asked = !gflags::GetCommandLineFlagInfoOrDie("gpu_decode").is_default;
  std::string why;
  if (FLAGS_gpu_decode != 1) {
    return Status::InvalidArgument("--gpu-decode " + std::to_string(FLAGS_gpu_decode) + ": 0 or 1");
  } else if (cfg.gpus.size() != 1) {
    why = "it serves one GPU per process, and --gpus names " + std::to_string(cfg.gpus.size());
  } else if (!GpuDecodeBuilt()) {
    why = "this tally was built without nvJPEG (tools/install_deps.sh installs it)";
  }
  if (why.empty()) {
    *use = true;
  } else if (asked) {
    return Status::InvalidArgument("--gpu-decode 1: " + why + "; --gpu-decode 0 decodes on the CPU");
  }
  return Status::Ok();
}

// --elastic's synthetic examples: example p of an epoch is row p % batch of the batch that
// worker p / (batches x batch) draws at that epoch's batch (p / batch) % batches without
// --elastic, so that until the workers change every worker reads what it reads without it.
class SyntheticExamples {
 public:
  SyntheticExamples(const TrainerConfig& cfg, int64_t batches, int batch)
      : shape_(cfg.model.image_shape), classes_(cfg.model.num_classes), batches_(batches), batch_(batch) {}
  Status Read(const ElasticStep& at, Tensor* images, Tensor* labels) {
    if (FLAGS_benchmark != 0 && first_.first.defined()) {  // one batch, over and over
      *images = first_.first;
      *labels = first_.second;
      return Status::Ok();
    }
    TALLY_RETURN_IF_ERROR(Gather(at, images, labels));
    if (FLAGS_benchmark != 0) first_ = {*images, *labels};
    return Status::Ok();
  }

 private:
  Status Gather(const ElasticStep& at, Tensor* images, Tensor* labels) {
    const int64_t per_worker = batches_ * batch_;
    for (int j = 0; j < batch_; ++j) {
      const int64_t p = at.batch.positions[static_cast<size_t>(j)];
      const uint64_t stream = 2 + static_cast<uint64_t>(p / per_worker);
      const uint64_t position = static_cast<uint64_t>(at.epoch * batches_ + (p % per_worker) / batch_);
      const auto& [from_images, from_labels] = Drawn(stream, position);
      if (j == 0) {
        Shape shape = from_images.shape();
        *images = Tensor::Empty(shape, DType::kF32);
        *labels = Tensor::Empty({batch_}, DType::kI32);
      }
      const int64_t row = p % batch_, floats = from_images.numel() / batch_;
      std::copy_n(from_images.data<float>() + row * floats, floats, images->data<float>() + j * floats);
      labels->data<int32_t>()[j] = from_labels.data<int32_t>()[row];
    }
    return Status::Ok();
  }

  // The batch of (stream, position), drawn once while it is among the last few used.
  const std::pair<Tensor, Tensor>& Drawn(uint64_t stream, uint64_t position) {
    const auto key = std::make_pair(stream, position);
    auto it = drawn_.find(key);
    if (it != drawn_.end()) return it->second;
    if (drawn_.size() >= 8) drawn_.erase(order_.front()), order_.erase(order_.begin());
    SyntheticData data(shape_, classes_, FLAGS_seed, stream);
    data.Seek(position);
    std::pair<Tensor, Tensor>& batch = drawn_[key];
    data.NextBatch(batch_, &batch.first, &batch.second);
    order_.push_back(key);
    return batch;
  }

  const Shape shape_;
  const int classes_;
  const int64_t batches_;
  const int batch_;
  std::map<std::pair<uint64_t, uint64_t>, std::pair<Tensor, Tensor>> drawn_;
  std::vector<std::pair<uint64_t, uint64_t>> order_;
  std::pair<Tensor, Tensor> first_;  // --benchmark 1: the batch reused
};

// --elastic's pack reader: a Loader (or, gpu set, a GpuLoader) decoding this worker's
// forecast batches ahead (LoaderConfig::plan), made again from the step whose batch differs
// from the forecast (a change applied: rare).
class RecordExamples {
 public:
  // gpu: the GPU loader's settings but the loader's (base), when the GPU decodes.
  RecordExamples(LoaderConfig base, std::unique_ptr<GpuLoaderConfig> gpu, int rank, int num_classes)
      : base_(std::move(base)), gpu_(std::move(gpu)), rank_(rank), num_classes_(num_classes) {}
  Status Read(const ElasticReader& reader, const ElasticStep& at, int64_t step, Tensor* images, Tensor* labels) {
    bool fits = loader_ != nullptr && step == first_step_ + taken_;
    if (fits) {
      int64_t epoch = 0, index = 0;
      const ShardBatch f = base_.plan->At(step, &epoch, &index);
      fits = epoch == at.epoch && f.positions == at.batch.positions && f.pad == at.batch.pad;
    }
    if (!fits) {
      loader_.reset();
      gpu_loader_.reset();
      base_.plan = reader.shards()->ForecastOf(at.reads ? rank_ : -1);
      base_.plan_first_step = first_step_ = step;
      taken_ = 0;
      Status s;
      if (gpu_ != nullptr) {
        gpu_->loader = base_;
        s = GpuLoader::Create(*gpu_, &gpu_loader_);
      } else {
        s = Loader::Create(base_, &loader_);
      }
      const char* flag = gpu_ != nullptr ? "--data-train (decoded on the GPU): " : "--data-train: ";
      if (!s.ok()) return Status::InvalidArgument(flag + s.message());
    }
    Batch b;
    TALLY_RETURN_IF_ERROR(gpu_loader_ != nullptr ? gpu_loader_->NextBatch(&b) : loader_->NextBatch(&b));
    ++taken_;
    TALLY_RETURN_IF_ERROR(CheckLabels(b.labels, b.images.dim(0), num_classes_));
    *images = b.images;
    *labels = b.labels;
    return Status::Ok();
  }

 private:
  LoaderConfig base_;
  const std::unique_ptr<GpuLoaderConfig> gpu_;
  const int rank_, num_classes_;
  std::unique_ptr<Loader> loader_;
  std::unique_ptr<GpuLoader> gpu_loader_;
  int64_t first_step_ = 0, taken_ = 0;
};

// The examples of an epoch a checkpoint's data position was recorded with (0: none recorded).
Status RecordedExamples(const DataPosition& start, int64_t* examples) {
  *examples = 0;
  auto it = start.info.find("membership");
  if (it == start.info.end()) return Status::Ok();
  ElasticRecord record;
  TALLY_RETURN_IF_ERROR(ElasticRecord::FromJson("the checkpoint", it->second, &record));
  *examples = record.num_examples;
  return Status::Ok();
}

// --elastic: the synthetic set (the starting workers' shares, unchanged for the run and its
// resumptions) or the pack, read through an elastic source.
Status MakeElasticTrainSource(const TrainerConfig& cfg, int rank, int workers, const DataPosition& start,
                              std::unique_ptr<BatchSource>* out) {
  const int batch = FLAGS_batch_size;
  if (FLAGS_data_train.empty()) {
    if (FLAGS_num_examples < batch) return Status::InvalidArgument("--num-examples must be at least --batch-size");
    const int64_t batches = FLAGS_num_examples / batch;
    int64_t examples = 0;
    TALLY_RETURN_IF_ERROR(RecordedExamples(start, &examples));
    if (examples == 0) examples = workers * batches * batch;
    if (examples % (batches * batch) != 0) {
      return Status::InvalidArgument("the checkpoint's epoch of " + std::to_string(examples) +
                                     " synthetic examples is no whole number of workers' --num-examples");
    }
    auto synthetic = std::make_shared<SyntheticExamples>(cfg, batches, batch);
    return MakeElasticSource(rank, workers, examples, batch, start,
                             [synthetic](const ElasticReader&, const ElasticStep& at, int64_t, Tensor* images,
                                         Tensor* labels) { return synthetic->Read(at, images, labels); },
                             out);
  }
  bool gpu_decode = false;
  TALLY_RETURN_IF_ERROR(UseGpuDecode(cfg, &gpu_decode));
  LoaderConfig lc;
  TALLY_RETURN_IF_ERROR(LoaderConfigFor(cfg, FLAGS_data_train, IdxFor(FLAGS_data_train, FLAGS_data_train_idx), true,
                                        rank, workers, DataPosition(), &lc));
  std::unique_ptr<RecordReader> pack;
  PartSizes sizes;
  Status s = OpenLoaderPack(lc, "loader", &pack, &sizes);
  if (!s.ok()) return Status::InvalidArgument("--data-train: " + s.message());
  const int64_t examples = static_cast<int64_t>(pack->num_indexed());
  std::unique_ptr<GpuLoaderConfig> gpu;
  if (gpu_decode) {
    gpu = std::make_unique<GpuLoaderConfig>();
    TALLY_RETURN_IF_ERROR(GpuLoaderConfigFor(cfg, lc, gpu.get()));
    std::printf("tally train: training images decoded on cuda:%d by nvJPEG (%s decoder), --elastic's batches\n",
                gpu->device, FLAGS_gpu_decoder.c_str());
  }
  auto records = std::make_shared<RecordExamples>(lc, std::move(gpu), rank, cfg.model.num_classes);
  return MakeElasticSource(rank, workers, examples, batch, start,
                           [records](const ElasticReader& reader, const ElasticStep& at, int64_t step, Tensor* images,
                                     Tensor* labels) { return records->Read(reader, at, step, images, labels); },
                           out);
}

}  // namespace

Status MakeTrainSource(const TrainerConfig& cfg, int rank, int workers, const DataPosition& start,
                       std::unique_ptr<BatchSource>* out) {
  ElasticOptions elastic;
  TALLY_RETURN_IF_ERROR(ElasticFlags(&elastic));
  if (elastic.elastic) return MakeElasticTrainSource(cfg, rank, workers, start, out);
  if (FLAGS_data_train.empty()) {
    if (FLAGS_num_examples < FLAGS_batch_size) return Status::InvalidArgument("--num-examples must be at least --batch-size");
    const int64_t batches = FLAGS_num_examples / FLAGS_batch_size;
    if (start.batch >= batches) return Status::InvalidArgument("the resume position is past the epoch's end");
    out->reset(new SyntheticSource(cfg, 2 + rank, batches, FLAGS_batch_size, FLAGS_benchmark != 0,
                                   start.epoch * batches + start.batch, /*cycle=*/false));
    return Status::Ok();
  }
  bool gpu_decode = false;
  TALLY_RETURN_IF_ERROR(UseGpuDecode(cfg, &gpu_decode));
  const std::string idx = IdxFor(FLAGS_data_train, FLAGS_data_train_idx);
  std::unique_ptr<BatchSource> source;
  std::string decoded_by;
  if (gpu_decode) {
    LoaderConfig lc;
    TALLY_RETURN_IF_ERROR(LoaderConfigFor(cfg, FLAGS_data_train, idx, true, rank, workers, start, &lc));
    GpuLoaderConfig gc;
    TALLY_RETURN_IF_ERROR(GpuLoaderConfigFor(cfg, lc, &gc));
    std::unique_ptr<GpuLoader> loader;
    Status s = GpuLoader::Create(gc, &loader);
    if (!s.ok()) return Status::InvalidArgument("--data-train (decoded on the GPU, --gpu-decode 1): " + s.message());
    decoded_by = "cuda:" + std::to_string(gc.device) + " by nvJPEG (" + loader->decoder() + " decoder, tuning " +
                 DescribeGpuDecodeTuning(gc.tuning) + ")";
    source.reset(new GpuRecordSource(std::move(loader), cfg.model.num_classes));
  } else {
    std::unique_ptr<Loader> loader;
    TALLY_RETURN_IF_ERROR(LoaderFor(cfg, FLAGS_data_train, idx, true, rank, workers, start, &loader));
    source.reset(new RecordSource(std::move(loader), cfg.model.num_classes, /*drop_pad=*/false));
  }
  if (start.batch >= source->batches_per_epoch()) {
    return Status::InvalidArgument("the resume position is past the epoch's end (the pack or the job changed)");
  }
  if (!decoded_by.empty()) std::printf("tally train: training images decoded on %s\n", decoded_by.c_str());
  *out = std::move(source);
  return Status::Ok();
}

Status MakeValSource(const TrainerConfig& cfg, std::unique_ptr<BatchSource>* out) {
  out->reset();
  if (!FLAGS_data_val.empty()) {
    std::unique_ptr<Loader> loader;
    TALLY_RETURN_IF_ERROR(LoaderFor(cfg, FLAGS_data_val, IdxFor(FLAGS_data_val, FLAGS_data_val_idx), false, 0, 1,
                                    DataPosition(), &loader));
    out->reset(new RecordSource(std::move(loader), cfg.model.num_classes, /*drop_pad=*/true));
  } else if (FLAGS_data_train.empty() && FLAGS_num_val_examples > 0) {
    const int64_t batches = (FLAGS_num_val_examples + FLAGS_batch_size - 1) / FLAGS_batch_size;
    out->reset(new SyntheticSource(cfg, 1, batches, FLAGS_batch_size, false, 0, /*cycle=*/true));
  }
  return Status::Ok();
}

}  // namespace tally
