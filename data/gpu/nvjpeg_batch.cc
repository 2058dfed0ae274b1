#include "data/gpu/nvjpeg_batch.h"

#include <algorithm>
#include <cstring>

#include <glog/logging.h>

namespace tally {
namespace {

constexpr size_t kAlign = 256;
size_t Aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The pixels one chroma sample covers, across and down; false for layouts without a fixed
// pair (grey, unknown).
bool ChromaFactors(nvjpegChromaSubsampling_t css, int* fx, int* fy) {
  switch (css) {
    case NVJPEG_CSS_444: *fx = 1, *fy = 1; return true;
    case NVJPEG_CSS_422: *fx = 2, *fy = 1; return true;
    case NVJPEG_CSS_420: *fx = 2, *fy = 2; return true;
    case NVJPEG_CSS_440: *fx = 1, *fy = 2; return true;
    case NVJPEG_CSS_411: *fx = 4, *fy = 1; return true;
    case NVJPEG_CSS_410: *fx = 4, *fy = 2; return true;
    default: return false;
  }
}

// nvJPEG's verdicts on the data rather than on the library or the device.
bool IsDataError(nvjpegStatus_t s) {
  return s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
         s == NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
}

}  // namespace

const char* NvjpegStatusName(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
    default: return "NVJPEG_STATUS_(unknown)";
  }
}

void FailNvjpeg(nvjpegStatus_t s, const char* expr, const char* file, int line) {
  cuda::FailCall("nvJPEG", NvjpegStatusName(s), "nvJPEG call failed", expr, file, line);
}

NvjpegProbe::NvjpegProbe(const NvjpegBatchDecoder& decoder) : decoder_(decoder) {
  TALLY_NVJPEG_CHECK(nvjpegJpegStreamCreate(decoder_.handle(), &stream_));
}

NvjpegProbe::~NvjpegProbe() { TALLY_NVJPEG_CHECK(nvjpegJpegStreamDestroy(stream_)); }

bool NvjpegProbe::GpuCanDecode(const uint8_t* data, size_t size, HostSample* sample) {
  if (nvjpegJpegStreamParseHeader(decoder_.handle(), data, size, stream_) != NVJPEG_STATUS_SUCCESS) return false;
  unsigned int components = 0;
  if (nvjpegJpegStreamGetComponentsNum(stream_, &components) != NVJPEG_STATUS_SUCCESS || components != 3) return false;
  if (decoder_.yuv() && !ReadChromaLayout(sample)) return false;
  if (!decoder_.hardware()) return true;
  int not_supported = 1;  // nvJPEG's convention: 0 means the hardware decoder takes it
  return nvjpegDecodeBatchedSupported(decoder_.handle(), stream_, &not_supported) == NVJPEG_STATUS_SUCCESS &&
         not_supported == 0;
}

bool NvjpegProbe::ReadChromaLayout(HostSample* sample) {
  unsigned int w[3] = {}, h[3] = {};
  for (unsigned int c = 1; c < 3; ++c) {
    if (nvjpegJpegStreamGetComponentDimensions(stream_, c, &w[c], &h[c]) != NVJPEG_STATUS_SUCCESS) return false;
  }
  nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
  if (nvjpegJpegStreamGetChromaSubsampling(stream_, &css) != NVJPEG_STATUS_SUCCESS) return false;
  if (!ChromaFactors(css, &sample->chroma_fx, &sample->chroma_fy)) return false;
  if (w[1] != w[2] || h[1] != h[2] || w[1] == 0 || h[1] == 0) return false;
  sample->chroma_w = static_cast<int>(w[1]);
  sample->chroma_h = static_cast<int>(h[1]);
  return true;
}

Status LoadHostSample(const RecordReader& reader, const Augmenter& augmenter, uint64_t seed, int64_t epoch,
                      int64_t record, bool cpu_decode, NvjpegProbe* probe, HostSample* sample) {
  auto where = [&] {
    return reader.path() + ": record " + std::to_string(record) + " at byte offset " +
           std::to_string(reader.index()[record].offset) + ": ";
  };
  TALLY_RETURN_IF_ERROR(reader.ReadIndexed(static_cast<size_t>(record), &sample->payload));
  ImageRecordHeader header;
  std::string_view bytes;
  Status s = UnpackImageRecord(sample->payload, &header, &bytes);
  if (!s.ok()) return Status::InvalidArgument(where() + s.message());
  sample->record = record;
  sample->label = static_cast<int32_t>(header.AllLabels()[0]);
  sample->jpeg = reinterpret_cast<const uint8_t*>(bytes.data());
  sample->jpeg_size = bytes.size();
  ImageInfo info;
  s = ReadImageInfo(sample->jpeg, sample->jpeg_size, &info);
  if (!s.ok()) return Status::InvalidArgument(where() + s.message());
  sample->width = info.width;
  sample->height = info.height;
  Rng rng(AugmentSeed(seed, epoch, record));
  sample->plan = augmenter.Plan(info.width, info.height, &rng);
  sample->on_gpu = !cpu_decode && info.format == ImageFormat::kJpeg &&
                   probe->GpuCanDecode(sample->jpeg, sample->jpeg_size, sample);
  if (sample->on_gpu) return Status::Ok();
  s = DecodeImage(sample->jpeg, sample->jpeg_size, DecodeOptions(), &sample->pixels);
  if (!s.ok()) return Status::InvalidArgument(where() + s.message());
  if (sample->pixels.width != info.width || sample->pixels.height != info.height) {
    return Status::InvalidArgument(where() + "decoded size differs from the header's");
  }
  return Status::Ok();
}

NvjpegBatchDecoder::NvjpegBatchDecoder(const GpuLoaderConfig& config)
    : config_(config), args_(GpuAugmentArgsFor(config.loader.augment, config.dtype, config.channels)) {}

Status NvjpegBatchDecoder::Create(const GpuLoaderConfig& config, std::unique_ptr<NvjpegBatchDecoder>* out) {
  std::unique_ptr<NvjpegBatchDecoder> d(new NvjpegBatchDecoder(config));
  TALLY_CUDA_CHECK(cudaSetDevice(config.device));
  d->slots_.resize(config.buffers);
  nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
  if (config.hardware_decoder) {
    d->hardware_ = d->CreateHandles(NVJPEG_BACKEND_HARDWARE, &s);
    if (!d->hardware_) {
      LOG(INFO) << "GPU loader: no nvJPEG hardware decoder on cuda:" << config.device << " ("
                << NvjpegStatusName(s) << "); using the GPU-assisted decoder";
    }
  }
  if (!d->hardware_ && !d->CreateHandles(NVJPEG_BACKEND_GPU_HYBRID, &s)) {
    return Status::Unavailable(std::string("GPU loader: nvjpegCreateExV2(NVJPEG_BACKEND_GPU_HYBRID) failed: ") +
                               NvjpegStatusName(s));
  }
  // The decode stream runs at the device's highest priority: its kernels are few and short
  // and the next step waits for them, while the training step's kernels fill the GPU.
  int least = 0, greatest = 0;
  TALLY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  if (!config.tuning.high_priority) greatest = 0;  // the default priority
  const LoaderConfig& c = config.loader;
  const int bs = c.batch_size;
  for (size_t i = 0; i < d->slots_.size(); ++i) {
    Slot& slot = d->slots_[i];
    if (d->OwnsStreamAndState(i)) {
      // A stream a slot: decodes of different slots on different threads run side by side.
      TALLY_CUDA_CHECK(cudaStreamCreateWithPriority(&slot.stream, cudaStreamNonBlocking, greatest));
      TALLY_NVJPEG_CHECK(nvjpegJpegStateCreate(slot.handle, &slot.state));
      // A refused output format (yuv-output) is said here, once, rather than at the first batch.
      const nvjpegStatus_t init = nvjpegDecodeBatchedInitialize(slot.handle, slot.state, bs, 1, d->OutputFormat());
      if (init != NVJPEG_STATUS_SUCCESS) {
        return Status::Unavailable(std::string("GPU loader: nvjpegDecodeBatchedInitialize refused the ") +
                                   (d->hardware_ ? "hardware" : "GPU-assisted") + " decoder's " +
                                   (d->yuv() ? "YCbCr (yuv-output)" : "interleaved RGB") + " output: " +
                                   NvjpegStatusName(init));
      }
    } else {
      slot.stream = d->slots_[0].stream;
      slot.state = d->slots_[0].state;
    }
    slot.output = Tensor::Empty({bs, c.augment.data_h, c.augment.data_w, config.channels}, config.dtype,
                                Device{Device::Kind::kCuda, config.device});
    TALLY_CUDA_CHECK(cudaEventCreateWithFlags(&slot.ready, cudaEventDisableTiming));
    TALLY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&slot.params_host), bs * sizeof(GpuAugmentSample),
                                   cudaHostAllocDefault));
    TALLY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot.params_dev), bs * sizeof(GpuAugmentSample)));
    TALLY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot.grey), bs * sizeof(float)));
  }
  *out = std::move(d);
  return Status::Ok();
}

// A handle a slot: decodes on one handle from several threads were measured to run one after
// the other, at no more batches a second than one thread's.
bool NvjpegBatchDecoder::CreateHandles(nvjpegBackend_t backend, nvjpegStatus_t* status) {
  const GpuDecodeTuning& t = config_.tuning;
  // A JPEG state belongs to the handle it was made with: one shared state, one handle.
  const size_t n = t.shared_handle || t.shared_state ? 1 : slots_.size();
  *status = NVJPEG_STATUS_SUCCESS;
  while (handles_.size() < n && *status == NVJPEG_STATUS_SUCCESS) {
    nvjpegHandle_t h = nullptr;
    *status = CreateHandle(backend, &h);
    if (*status == NVJPEG_STATUS_SUCCESS) handles_.push_back(h);
  }
  if (*status == NVJPEG_STATUS_SUCCESS && t.probe_handle) *status = CreateHandle(backend, &probe_handle_);
  if (*status != NVJPEG_STATUS_SUCCESS) {
    for (nvjpegHandle_t h : handles_) TALLY_NVJPEG_CHECK(nvjpegDestroy(h));
    handles_.clear();
    probe_handle_ = nullptr;
    return false;
  }
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].handle = handles_[i % handles_.size()];
  return true;
}

nvjpegStatus_t NvjpegBatchDecoder::CreateHandle(nvjpegBackend_t backend, nvjpegHandle_t* handle) {
  if (!config_.tuning.pooled_memory) return nvjpegCreateEx(backend, nullptr, nullptr, 0, handle);
  // nvJPEG's allocator callbacks, drawing on the pools: 0 is success.
  auto allocate = [](void* pool, void** ptr, size_t size, cudaStream_t stream) {
    *ptr = static_cast<BlockPool*>(pool)->Allocate(size, stream);
    return *ptr == nullptr ? 1 : 0;
  };
  auto release = [](void* pool, void* ptr, size_t, cudaStream_t stream) {
    static_cast<BlockPool*>(pool)->Release(ptr, stream);
    return 0;
  };
  nvjpegDevAllocatorV2_t device{allocate, release, &device_pool_};
  nvjpegPinnedAllocatorV2_t pinned{allocate, release, &pinned_pool_};
  return nvjpegCreateExV2(backend, &device, &pinned, 0, handle);
}

size_t NvjpegBatchDecoder::Room(const HostSample& h) const {
  if (!yuv() || !h.on_gpu) return Aligned(size_t{3} * h.width * h.height);
  return ChromaOffset(h, 2) + Aligned(size_t{1} * h.chroma_w * h.chroma_h);
}

size_t NvjpegBatchDecoder::ChromaOffset(const HostSample& h, int plane) {
  return Aligned(size_t{1} * h.width * h.height) + (plane - 1) * Aligned(size_t{1} * h.chroma_w * h.chroma_h);
}

void NvjpegBatchDecoder::Grow(BlockPool& pool, cudaStream_t stream, size_t want, uint8_t** p, size_t* bytes) {
  if (want <= *bytes) return;
  // Handed back on the slot's stream, after the work queued there that used it.
  pool.Release(*p, stream);
  *bytes = want + want / 4;  // headroom: image sizes vary from batch to batch
  *p = static_cast<uint8_t*>(pool.Allocate(*bytes, stream));
  if (*p == nullptr) LOG(FATAL) << "GPU loader: out of " << (&pool == &device_pool_ ? "device" : "pinned")
                                << " memory for a batch's images (" << *bytes << " bytes)";
}

NvjpegBatchDecoder::~NvjpegBatchDecoder() {
  for (Slot& s : slots_) {
    if (s.stream != nullptr) TALLY_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != nullptr && OwnsStreamAndState(i)) TALLY_NVJPEG_CHECK(nvjpegJpegStateDestroy(s.state));
    if (s.ready != nullptr) TALLY_CUDA_CHECK(cudaEventDestroy(s.ready));
    if (s.params_host != nullptr) TALLY_CUDA_CHECK(cudaFreeHost(s.params_host));
    if (s.params_dev != nullptr) TALLY_CUDA_CHECK(cudaFree(s.params_dev));
    if (s.grey != nullptr) TALLY_CUDA_CHECK(cudaFree(s.grey));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].stream != nullptr && OwnsStreamAndState(i)) TALLY_CUDA_CHECK(cudaStreamDestroy(slots_[i].stream));
  }
  for (nvjpegHandle_t h : handles_) TALLY_NVJPEG_CHECK(nvjpegDestroy(h));
  if (probe_handle_ != nullptr) TALLY_NVJPEG_CHECK(nvjpegDestroy(probe_handle_));
}

Status NvjpegBatchDecoder::Decode(int slot, cudaEvent_t release, HostBatch* batch, const Replace& replace) {
  ElapsedMicros<std::atomic<int64_t>> timer(&decode_us_);
  Slot& s = slots_[slot];
  // The slot's previous batch must be done with its buffers (usually long since).
  if (s.used) TALLY_CUDA_CHECK(cudaEventSynchronize(s.ready));
  s.used = true;
  s.in_flight.clear();
  const int n = static_cast<int>(batch->samples.size());
  // Every image gets room in the device buffer, whichever decoder fills it.
  size_t total = 0;
  for (const HostSample& h : batch->samples) total += Room(h);
  Grow(device_pool_, s.stream, total, &s.images, &s.images_bytes);
  TALLY_RETURN_IF_ERROR(DecodeOnGpu(s, batch, replace));
  UploadCpuImages(s, batch);
  size_t offset = 0;
  for (int j = 0; j < n; ++j) {
    const HostSample& h = batch->samples[j];
    GpuAugmentSample& p = s.params_host[j];
    p = GpuSampleFor(h.plan, h.width, h.height, s.images + offset);
    if (yuv() && h.on_gpu) {
      p.cb = p.pixels + ChromaOffset(h, 1);
      p.cr = p.pixels + ChromaOffset(h, 2);
      p.chroma_w = h.chroma_w;
      p.chroma_fx = h.chroma_fx;
      p.chroma_fy = h.chroma_fy;
    }
    offset += Room(h);
  }
  TALLY_CUDA_CHECK(cudaMemcpyAsync(s.params_dev, s.params_host, n * sizeof(GpuAugmentSample), cudaMemcpyHostToDevice,
                                   s.stream));
  // Only the output is shared with the consumer: wait for it to be done with it just here.
  if (release != nullptr) TALLY_CUDA_CHECK(cudaStreamWaitEvent(s.stream, release, 0));
  LaunchGpuAugment(s.params_dev, n, s.grey, args_, s.output.raw_data(), s.stream);
  TALLY_CUDA_CHECK(cudaEventRecord(s.ready, s.stream));
  s.in_flight = std::move(batch->samples);
  return Status::Ok();
}

NvjpegBatchDecoder::GpuJob NvjpegBatchDecoder::LayOut(Slot& s, const HostBatch& batch) const {
  GpuJob job;
  size_t offset = 0;
  for (int j = 0; j < static_cast<int>(batch.samples.size()); ++j) {
    const HostSample& h = batch.samples[j];
    if (h.on_gpu) {
      nvjpegImage_t image = {};
      image.channel[0] = s.images + offset;
      if (yuv()) {
        image.pitch[0] = static_cast<unsigned int>(h.width);
        image.channel[1] = image.channel[0] + ChromaOffset(h, 1);
        image.channel[2] = image.channel[0] + ChromaOffset(h, 2);
        image.pitch[1] = image.pitch[2] = static_cast<unsigned int>(h.chroma_w);
      } else {
        image.pitch[0] = static_cast<unsigned int>(3 * h.width);
      }
      job.data.push_back(h.jpeg);
      job.lengths.push_back(h.jpeg_size);
      job.dest.push_back(image);
      job.which.push_back(j);
    }
    offset += Room(h);
  }
  return job;
}

// With init_once, the state is initialized again only for another batch size, or after a
// preallocation. What is known of a state is kept by the slot that owns it.
void NvjpegBatchDecoder::PrepareState(Slot& s, const HostBatch& batch, const std::vector<int>& which) {
  Slot& owner = config_.tuning.shared_state ? slots_[0] : s;  // the slot whose state it is
  if (hardware_ && config_.tuning.preallocate) {
    int w = 0, h = 0;
    for (int j : which) {
      w = std::max(w, batch.samples[j].width);
      h = std::max(h, batch.samples[j].height);
    }
    if (w > owner.prealloc_w || h > owner.prealloc_h) {
      Preallocate(owner, w, h);
      owner.initialized_for = 0;
    }
  }
  const int m = static_cast<int>(which.size());
  if (!config_.tuning.init_once || owner.initialized_for != m) {
    TALLY_NVJPEG_CHECK(nvjpegDecodeBatchedInitialize(owner.handle, owner.state, m, 1, OutputFormat()));
    owner.initialized_for = m;
  }
}

Status NvjpegBatchDecoder::DecodeOnGpu(Slot& s, HostBatch* batch, const Replace& replace) {
  GpuJob job = LayOut(s, *batch);
  if (job.which.empty()) return Status::Ok();
  const int m = static_cast<int>(job.which.size());
  if (config_.tuning.pinned_input) StageInput(s, *batch, &job.data);
  PrepareState(s, *batch, job.which);
  nvjpegStatus_t st;
  {
    ElapsedMicros<std::atomic<int64_t>> timer(&nvjpeg_us_);
    st = nvjpegDecodeBatched(s.handle, s.state, job.data.data(), job.lengths.data(), job.dest.data(), s.stream);
  }
  if (st == NVJPEG_STATUS_SUCCESS) {
    gpu_decoded_ += m;
    return Status::Ok();
  }
  if (!IsDataError(st)) FailNvjpeg(st, "nvjpegDecodeBatched(handle, state, ...)", __FILE__, __LINE__);
  // nvJPEG does not say which image it failed on: the CPU decodes the whole group.
  LOG(WARNING) << "GPU loader: nvjpegDecodeBatched failed (" << NvjpegStatusName(st) << ") on a batch of " << m
               << " images; decoding them on the CPU";
  for (int j : job.which) {
    HostSample& h = batch->samples[j];
    h.on_gpu = false;
    Status d = DecodeImage(h.jpeg, h.jpeg_size, DecodeOptions(), &h.pixels);
    if (!d.ok() || h.pixels.width != h.width || h.pixels.height != h.height) {
      TALLY_RETURN_IF_ERROR(replace(j, d.ok() ? Status::InvalidArgument("decoded size differs from the header") : d));
    }
  }
  // Every image now comes from the CPU and replacements may be larger: lay the buffer out
  // again, once whatever the failed call queued has drained.
  TALLY_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  size_t total = 0;
  for (const HostSample& h : batch->samples) total += Room(h);
  Grow(device_pool_, s.stream, total, &s.images, &s.images_bytes);
  return Status::Ok();
}

// The hardware decoder sizes its buffers to the images it meets and reallocates for a larger
// one. The pools keep that from waiting for the device (block_pool.h); preallocating for a
// quarter more than the largest image so far (4:4:4, the most room per pixel) also keeps the
// reallocations, and the pool's growth, out of the steady state. A refusal costs only that:
// the decoder allocates as it goes.
void NvjpegBatchDecoder::Preallocate(Slot& s, int width, int height) {
  const int w = std::max(s.prealloc_w, width + width / 4), h = std::max(s.prealloc_h, height + height / 4);
  const nvjpegStatus_t st = nvjpegDecodeBatchedPreAllocate(s.handle, s.state, config_.loader.batch_size, w, h,
                                                           NVJPEG_CSS_444, OutputFormat());
  if (st != NVJPEG_STATUS_SUCCESS) {
    LOG_FIRST_N(WARNING, 1) << "GPU loader: nvjpegDecodeBatchedPreAllocate(" << w << "x" << h << ") failed ("
                            << NvjpegStatusName(st) << "); the decoder allocates as it goes";
  }
  s.prealloc_w = w;
  s.prealloc_h = h;
}

// The hardware decoder reads its bitstreams straight from the pointers it is given; from
// pageable memory that is a slower, staged copy (pinned_input measures whether it matters).
// The slot's previous decode is over (Decode waited for it), so its buffer is free.
void NvjpegBatchDecoder::StageInput(Slot& s, const HostBatch& batch, std::vector<const unsigned char*>* data) {
  size_t total = 0;
  for (const HostSample& h : batch.samples) {
    if (h.on_gpu) total += Aligned(h.jpeg_size);
  }
  Grow(pinned_pool_, s.stream, total, &s.input, &s.input_bytes);
  size_t at = 0, k = 0;
  for (const HostSample& h : batch.samples) {
    if (!h.on_gpu) continue;
    std::memcpy(s.input + at, h.jpeg, h.jpeg_size);
    (*data)[k++] = s.input + at;
    at += Aligned(h.jpeg_size);
  }
}

void NvjpegBatchDecoder::UploadCpuImages(Slot& s, HostBatch* batch) {
  size_t staged = 0;
  for (const HostSample& h : batch->samples) {
    if (!h.on_gpu) staged += Aligned(h.pixels.pixels.size());
  }
  if (staged == 0) return;
  Grow(pinned_pool_, s.stream, staged, &s.staging, &s.staging_bytes);
  size_t offset = 0, at = 0;
  for (const HostSample& h : batch->samples) {
    const size_t room = Room(h);
    if (!h.on_gpu) {
      std::memcpy(s.staging + at, h.pixels.pixels.data(), h.pixels.pixels.size());
      TALLY_CUDA_CHECK(cudaMemcpyAsync(s.images + offset, s.staging + at, h.pixels.pixels.size(),
                                       cudaMemcpyHostToDevice, s.stream));
      at += Aligned(h.pixels.pixels.size());
      ++cpu_decoded_;
    }
    offset += room;
  }
}

}  // namespace tally
