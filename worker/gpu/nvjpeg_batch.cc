#include "worker/gpu/nvjpeg_batch.h"

#include <algorithm>
#include <cstring>

#include <glog/logging.h>

namespace tally {
namespace {

constexpr size_t kAlign = 256;
size_t Aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Grows a device buffer; its old contents are not kept. Only called while nothing queued
// uses it (the slot's previous batch has completed).
void GrowDevice(size_t want, uint8_t** p, size_t* bytes) {
  if (want <= *bytes) return;
  if (*p != nullptr) TALLY_CUDA_CHECK(cudaFree(*p));
  *bytes = want + want / 4;  // headroom: image sizes vary from batch to batch
  TALLY_CUDA_CHECK(cudaMalloc(p, *bytes));
}

void GrowPinned(size_t want, uint8_t** p, size_t* bytes) {
  if (want <= *bytes) return;
  if (*p != nullptr) TALLY_CUDA_CHECK(cudaFreeHost(*p));
  *bytes = want + want / 4;
  TALLY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(p), *bytes, cudaHostAllocDefault));
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

bool NvjpegProbe::GpuCanDecode(const uint8_t* data, size_t size) {
  if (nvjpegJpegStreamParseHeader(decoder_.handle(), data, size, stream_) != NVJPEG_STATUS_SUCCESS) return false;
  unsigned int components = 0;
  if (nvjpegJpegStreamGetComponentsNum(stream_, &components) != NVJPEG_STATUS_SUCCESS || components != 3) return false;
  if (!decoder_.hardware()) return true;
  int not_supported = 1;  // nvJPEG's convention: 0 means the hardware decoder takes it
  return nvjpegDecodeBatchedSupported(decoder_.handle(), stream_, &not_supported) == NVJPEG_STATUS_SUCCESS &&
         not_supported == 0;
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
  sample->on_gpu = !cpu_decode && info.format == ImageFormat::kJpeg && probe->GpuCanDecode(sample->jpeg, sample->jpeg_size);
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
  nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
  if (config.hardware_decoder) {
    s = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &d->handle_);
    d->hardware_ = s == NVJPEG_STATUS_SUCCESS;
    if (!d->hardware_) {
      LOG(INFO) << "GPU loader: no nvJPEG hardware decoder on cuda:" << config.device << " ("
                << NvjpegStatusName(s) << "); using the GPU-assisted decoder";
    }
  }
  if (!d->hardware_) {
    s = nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, nullptr, nullptr, 0, &d->handle_);
    if (s != NVJPEG_STATUS_SUCCESS) {
      return Status::Unavailable(std::string("GPU loader: nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID) failed: ") +
                                 NvjpegStatusName(s));
    }
  }
  // The decode stream runs at the device's highest priority: its kernels are few and short
  // and the next step waits for them, while the training step's kernels fill the GPU.
  int least = 0, greatest = 0;
  TALLY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  TALLY_CUDA_CHECK(cudaStreamCreateWithPriority(&d->stream_, cudaStreamNonBlocking, greatest));
  const LoaderConfig& c = config.loader;
  const int bs = c.batch_size;
  for (Slot& slot : d->slots_) {
    slot.output = Tensor::Empty({bs, c.augment.data_h, c.augment.data_w, config.channels}, config.dtype,
                                Device{Device::Kind::kCuda, config.device});
    TALLY_NVJPEG_CHECK(nvjpegJpegStateCreate(d->handle_, &slot.state));
    TALLY_CUDA_CHECK(cudaEventCreateWithFlags(&slot.ready, cudaEventDisableTiming));
    TALLY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&slot.params_host), bs * sizeof(GpuAugmentSample),
                                   cudaHostAllocDefault));
    TALLY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot.params_dev), bs * sizeof(GpuAugmentSample)));
    TALLY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot.grey), bs * sizeof(float)));
  }
  *out = std::move(d);
  return Status::Ok();
}

NvjpegBatchDecoder::~NvjpegBatchDecoder() {
  if (stream_ != nullptr) TALLY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (Slot& s : slots_) {
    if (s.state != nullptr) TALLY_NVJPEG_CHECK(nvjpegJpegStateDestroy(s.state));
    if (s.ready != nullptr) TALLY_CUDA_CHECK(cudaEventDestroy(s.ready));
    if (s.images != nullptr) TALLY_CUDA_CHECK(cudaFree(s.images));
    if (s.staging != nullptr) TALLY_CUDA_CHECK(cudaFreeHost(s.staging));
    if (s.params_host != nullptr) TALLY_CUDA_CHECK(cudaFreeHost(s.params_host));
    if (s.params_dev != nullptr) TALLY_CUDA_CHECK(cudaFree(s.params_dev));
    if (s.grey != nullptr) TALLY_CUDA_CHECK(cudaFree(s.grey));
  }
  if (stream_ != nullptr) TALLY_CUDA_CHECK(cudaStreamDestroy(stream_));
  if (handle_ != nullptr) TALLY_NVJPEG_CHECK(nvjpegDestroy(handle_));
}

Status NvjpegBatchDecoder::Decode(int slot, cudaEvent_t release, HostBatch* batch, const Replace& replace) {
  Slot& s = slots_[slot];
  // The slot's previous batch must be done with its buffers (usually long since).
  if (s.used) TALLY_CUDA_CHECK(cudaEventSynchronize(s.ready));
  s.used = true;
  s.in_flight.clear();
  const int n = static_cast<int>(batch->samples.size());
  // Every image gets room in the device buffer, whichever decoder fills it.
  size_t total = 0;
  for (const HostSample& h : batch->samples) total += Aligned(size_t{3} * h.width * h.height);
  GrowDevice(total, &s.images, &s.images_bytes);
  TALLY_RETURN_IF_ERROR(DecodeOnGpu(s, batch, replace));
  UploadCpuImages(s, batch);
  size_t offset = 0;
  for (int j = 0; j < n; ++j) {
    const HostSample& h = batch->samples[j];
    s.params_host[j] = GpuSampleFor(h.plan, h.width, h.height, s.images + offset);
    offset += Aligned(size_t{3} * h.width * h.height);
  }
  TALLY_CUDA_CHECK(cudaMemcpyAsync(s.params_dev, s.params_host, n * sizeof(GpuAugmentSample), cudaMemcpyHostToDevice,
                                   stream_));
  // Only the output is shared with the consumer: wait for it to be done with it just here.
  if (release != nullptr) TALLY_CUDA_CHECK(cudaStreamWaitEvent(stream_, release, 0));
  LaunchGpuAugment(s.params_dev, n, s.grey, args_, s.output.raw_data(), stream_);
  TALLY_CUDA_CHECK(cudaEventRecord(s.ready, stream_));
  s.in_flight = std::move(batch->samples);
  return Status::Ok();
}

Status NvjpegBatchDecoder::DecodeOnGpu(Slot& s, HostBatch* batch, const Replace& replace) {
  std::vector<const unsigned char*> data;
  std::vector<size_t> lengths;
  std::vector<nvjpegImage_t> dest;
  std::vector<int> which;
  size_t offset = 0;
  for (int j = 0; j < static_cast<int>(batch->samples.size()); ++j) {
    const HostSample& h = batch->samples[j];
    const size_t bytes = size_t{3} * h.width * h.height;
    if (h.on_gpu) {
      nvjpegImage_t image = {};
      image.channel[0] = s.images + offset;
      image.pitch[0] = static_cast<unsigned int>(3 * h.width);
      data.push_back(h.jpeg);
      lengths.push_back(h.jpeg_size);
      dest.push_back(image);
      which.push_back(j);
    }
    offset += Aligned(bytes);
  }
  if (which.empty()) return Status::Ok();
  const int m = static_cast<int>(which.size());
  if (hardware_) {
    int w = 0, h = 0;
    for (int j : which) {
      w = std::max(w, batch->samples[j].width);
      h = std::max(h, batch->samples[j].height);
    }
    if (w > s.prealloc_w || h > s.prealloc_h) Preallocate(s, w, h);
  }
  TALLY_NVJPEG_CHECK(nvjpegDecodeBatchedInitialize(handle_, s.state, m, 1, NVJPEG_OUTPUT_RGBI));
  const nvjpegStatus_t st = nvjpegDecodeBatched(handle_, s.state, data.data(), lengths.data(), dest.data(), stream_);
  if (st == NVJPEG_STATUS_SUCCESS) {
    gpu_decoded_ += m;
    return Status::Ok();
  }
  if (!IsDataError(st)) FailNvjpeg(st, "nvjpegDecodeBatched(handle, state, ...)", __FILE__, __LINE__);
  // nvJPEG does not say which image it failed on: the CPU decodes the whole group.
  LOG(WARNING) << "GPU loader: nvjpegDecodeBatched failed (" << NvjpegStatusName(st) << ") on a batch of " << m
               << " images; decoding them on the CPU";
  for (int j : which) {
    HostSample& h = batch->samples[j];
    h.on_gpu = false;
    Status d = DecodeImage(h.jpeg, h.jpeg_size, DecodeOptions(), &h.pixels);
    if (!d.ok() || h.pixels.width != h.width || h.pixels.height != h.height) {
      TALLY_RETURN_IF_ERROR(replace(j, d.ok() ? Status::InvalidArgument("decoded size differs from the header") : d));
    }
  }
  // Every image now comes from the CPU and replacements may be larger: lay the buffer out
  // again, once whatever the failed call queued has drained.
  TALLY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  size_t total = 0;
  for (const HostSample& h : batch->samples) total += Aligned(size_t{3} * h.width * h.height);
  GrowDevice(total, &s.images, &s.images_bytes);
  return Status::Ok();
}

// The hardware decoder sizes its buffers to the images it meets and reallocates for a larger
// one, and cudaFree waits for the whole device, the training step included: decoding would
// then run after the step instead of beside it. Preallocating for a quarter more than the
// largest image so far (4:4:4, the most room per pixel) keeps that out of the steady state.
// A refusal costs only that: the decoder allocates as it goes.
void NvjpegBatchDecoder::Preallocate(Slot& s, int width, int height) {
  const int w = std::max(s.prealloc_w, width + width / 4), h = std::max(s.prealloc_h, height + height / 4);
  const nvjpegStatus_t st = nvjpegDecodeBatchedPreAllocate(handle_, s.state, config_.loader.batch_size, w, h,
                                                           NVJPEG_CSS_444, NVJPEG_OUTPUT_RGBI);
  if (st != NVJPEG_STATUS_SUCCESS) {
    LOG_FIRST_N(WARNING, 1) << "GPU loader: nvjpegDecodeBatchedPreAllocate(" << w << "x" << h << ") failed ("
                            << NvjpegStatusName(st) << "); the decoder allocates as it goes";
  }
  s.prealloc_w = w;
  s.prealloc_h = h;
}

void NvjpegBatchDecoder::UploadCpuImages(Slot& s, HostBatch* batch) {
  size_t staged = 0;
  for (const HostSample& h : batch->samples) {
    if (!h.on_gpu) staged += Aligned(h.pixels.pixels.size());
  }
  if (staged == 0) return;
  GrowPinned(staged, &s.staging, &s.staging_bytes);
  size_t offset = 0, at = 0;
  for (const HostSample& h : batch->samples) {
    const size_t room = Aligned(size_t{3} * h.width * h.height);
    if (!h.on_gpu) {
      std::memcpy(s.staging + at, h.pixels.pixels.data(), h.pixels.pixels.size());
      TALLY_CUDA_CHECK(cudaMemcpyAsync(s.images + offset, s.staging + at, h.pixels.pixels.size(),
                                       cudaMemcpyHostToDevice, stream_));
      at += Aligned(h.pixels.pixels.size());
      ++cpu_decoded_;
    }
    offset += room;
  }
}

}  // namespace tally
