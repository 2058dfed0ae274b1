// The pieces of the nvJPEG loader (data/gpu/nvjpeg_loader.cc) below its threading: one
// sample as the CPU prepares it, the per-thread nvJPEG probe that says whether the GPU can
// decode a JPEG, and the batch decoder that owns the GPU buffers of the slots (one per output
// buffer, GpuLoaderConfig::buffers).
//
//   NvjpegProbe probe(decoder);                          // one per thread
//   HostSample s;
//   TALLY_RETURN_IF_ERROR(LoadHostSample(reader, aug, seed, epoch, record, false, &probe, &s));
//   ... a HostBatch of them ...
//   TALLY_RETURN_IF_ERROR(decoder.Decode(slot, release_event, &batch, replace));
//   Tensor images = decoder.Output(slot);   // valid once ReadyEvent(slot) has completed
//
// Decode is called by one thread per slot at a time (the loader's GPU threads take turns by
// batch); decodes of different slots run side by side. Probes run on any thread.
#pragma once

#include <nvjpeg.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/gpu/augment_kernel.h"
#include "data/gpu/block_pool.h"
#include "data/gpu_loader.h"
#include "data/recordio.h"
#include "ops/cuda/check.h"

namespace tally {

// Adds the time it lives to *total, in microseconds: an int64_t the caller guards, or an
// std::atomic<int64_t>.
template <typename Counter>
class ElapsedMicros {
 public:
  explicit ElapsedMicros(Counter* total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~ElapsedMicros() {
    *total_ += std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
  }
  ElapsedMicros(const ElapsedMicros&) = delete;
  ElapsedMicros& operator=(const ElapsedMicros&) = delete;

 private:
  Counter* total_;
  std::chrono::steady_clock::time_point t0_;
};

[[noreturn]] void FailNvjpeg(nvjpegStatus_t s, const char* expr, const char* file, int line);
#define TALLY_NVJPEG_CHECK(expr)                                                     \
  do {                                                                               \
    nvjpegStatus_t tally_nvjpeg_status = (expr);                                     \
    if (tally_nvjpeg_status != NVJPEG_STATUS_SUCCESS) {                              \
      ::tally::FailNvjpeg(tally_nvjpeg_status, #expr, __FILE__, __LINE__);           \
    }                                                                                \
  } while (0)
const char* NvjpegStatusName(nvjpegStatus_t s);

struct HostSample {
  int64_t record = 0;
  int64_t part_position = 0, tries = 0;  // where it came from, to find a replacement
  int32_t label = 0;
  std::string payload;                   // the record; jpeg points into it
  const uint8_t* jpeg = nullptr;
  size_t jpeg_size = 0;
  int width = 0, height = 0;
  AugmentPlan plan;
  bool on_gpu = false;                   // nvJPEG decodes it; otherwise `pixels` holds it
  int chroma_w = 0, chroma_h = 0;        // its Cb and Cr planes' size (set by the probe)
  int chroma_fx = 1, chroma_fy = 1;      // pixels a chroma sample covers (2, 2 for 4:2:0)
  Image pixels;
};

struct HostBatch {
  Batch meta;  // labels, epoch, index, pad (images: none)
  std::vector<HostSample> samples;
};

class NvjpegBatchDecoder;

class NvjpegProbe {
 public:
  explicit NvjpegProbe(const NvjpegBatchDecoder& decoder);
  ~NvjpegProbe();
  // Whether the batched GPU decode takes this JPEG (3 components; for the hardware decoder
  // also a layout it supports: baseline, one scan, no 4:1:0 / 4:1:1; for YUV output, Cb and
  // Cr of one size and a known subsampling, whose layout it then sets in *sample).
  bool GpuCanDecode(const uint8_t* data, size_t size, HostSample* sample);

 private:
  // The chroma planes' size and subsampling of the JPEG just parsed; false if unusable.
  bool ReadChromaLayout(HostSample* sample);

  const NvjpegBatchDecoder& decoder_;
  nvjpegJpegStream_t stream_ = nullptr;
};

// Reads record `record`, unpacks it, plans its augmentation with the seed Loader uses, and
// decodes it on the CPU when asked to or when the GPU cannot. A failure is a bad record.
Status LoadHostSample(const RecordReader& reader, const Augmenter& augmenter, uint64_t seed, int64_t epoch,
                      int64_t record, bool cpu_decode, NvjpegProbe* probe, HostSample* sample);

class NvjpegBatchDecoder {
 public:
  static Status Create(const GpuLoaderConfig& config, std::unique_ptr<NvjpegBatchDecoder>* out);
  ~NvjpegBatchDecoder();

  // Replaces sample j (bad for reason `why`) with a CPU-decoded one.
  using Replace = std::function<Status(int j, const Status& why)>;
  // Queues the decode and augmentation of *batch into `slot`'s output; the augmentation waits
  // for `release` (unless null). Keeps the batch's samples until the slot's next use.
  Status Decode(int slot, cudaEvent_t release, HostBatch* batch, const Replace& replace);
  const Tensor& Output(int slot) const { return slots_[slot].output; }
  cudaEvent_t ReadyEvent(int slot) const { return slots_[slot].ready; }

  bool hardware() const { return hardware_; }
  bool yuv() const { return config_.tuning.yuv_output; }
  nvjpegOutputFormat_t OutputFormat() const { return yuv() ? NVJPEG_OUTPUT_YUV : NVJPEG_OUTPUT_RGBI; }
  // For parsing (NvjpegProbe): a handle of its own with GpuDecodeTuning::probe_handle, else
  // the first slot's.
  nvjpegHandle_t handle() const { return probe_handle_ != nullptr ? probe_handle_ : slots_[0].handle; }
  int64_t gpu_decoded() const { return gpu_decoded_; }
  int64_t cpu_decoded() const { return cpu_decoded_; }
  int num_slots() const { return static_cast<int>(slots_.size()); }
  // Seconds the calling thread spent in nvjpegDecodeBatched, and in Decode as a whole.
  double nvjpeg_seconds() const { return nvjpeg_us_ * 1e-6; }
  double decode_seconds() const { return decode_us_ * 1e-6; }
  // Blocks the decoder took from CUDA (nvJPEG's and its own), and their size; steady once
  // the largest batch has been seen.
  int64_t cuda_allocations() const { return device_pool_.cuda_allocations() + pinned_pool_.cuda_allocations(); }
  size_t pool_bytes() const { return device_pool_.bytes() + pinned_pool_.bytes(); }

 private:
  struct Slot {
    Tensor output;
    cudaStream_t stream = nullptr;  // its decodes, uploads and augmentation (OwnsStreamAndState)
    nvjpegHandle_t handle = nullptr;  // one of handles_
    nvjpegJpegState_t state = nullptr;
    cudaEvent_t ready = nullptr;
    bool used = false;
    uint8_t* images = nullptr;  // device: the decoded images
    size_t images_bytes = 0;
    uint8_t* staging = nullptr;  // pinned: CPU-decoded images on their way up
    size_t staging_bytes = 0;
    uint8_t* input = nullptr;  // pinned: the bitstreams, with GpuDecodeTuning::pinned_input
    size_t input_bytes = 0;
    GpuAugmentSample* params_host = nullptr;  // pinned
    GpuAugmentSample* params_dev = nullptr;
    float* grey = nullptr;  // device scratch, one float a sample
    int prealloc_w = 0, prealloc_h = 0;  // the hardware decoder's buffers fit images this large
    int initialized_for = 0;  // the batch size its state was last initialized for (init_once)
    // (prealloc_* and initialized_for describe the slot's own state: OwnsStreamAndState.)
    std::vector<HostSample> in_flight;  // read by queued copies and decodes
  };
  explicit NvjpegBatchDecoder(const GpuLoaderConfig& config);
  // Whether slot i has a stream and JPEG state of its own; with GpuDecodeTuning::shared_state
  // every slot uses slot 0's.
  bool OwnsStreamAndState(size_t i) const { return i == 0 || !config_.tuning.shared_state; }
  // The slots' handles (one each, or one shared) and the probes' own if tuned so, on
  // `backend`, drawing on the pools unless tuned not to; false (and why in *status) if refused.
  bool CreateHandles(nvjpegBackend_t backend, nvjpegStatus_t* status);
  nvjpegStatus_t CreateHandle(nvjpegBackend_t backend, nvjpegHandle_t* handle);
  // The bitstreams of the samples nvJPEG decodes, in page-locked memory (pinned_input).
  void StageInput(Slot& s, const HostBatch& batch, std::vector<const unsigned char*>* data);
  // Bytes a sample takes in a slot's image buffer: RGB, or the YCbCr planes nvJPEG writes
  // (GpuDecodeTuning::yuv_output), each plane aligned.
  size_t Room(const HostSample& h) const;
  // Where Cb (plane 1) or Cr (plane 2) of a YCbCr sample starts, from the start of its room.
  static size_t ChromaOffset(const HostSample& h, int plane);
  // Grows a slot's buffer from the pool; its old contents are not kept.
  void Grow(BlockPool& pool, cudaStream_t stream, size_t want, uint8_t** p, size_t* bytes);
  // One nvjpegDecodeBatched call's arguments: the samples nvJPEG decodes (`which`) and where.
  struct GpuJob {
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> dest;
    std::vector<int> which;
  };
  GpuJob LayOut(Slot& s, const HostBatch& batch) const;
  // Preallocates and initializes the slot's JPEG state for the batch, as tuned.
  void PrepareState(Slot& s, const HostBatch& batch, const std::vector<int>& which);
  Status DecodeOnGpu(Slot& s, HostBatch* batch, const Replace& replace);
  void UploadCpuImages(Slot& s, HostBatch* batch);
  // Sizes the hardware decoder's buffers for the batch's largest image, with room to spare.
  void Preallocate(Slot& s, int width, int height);

  const GpuLoaderConfig config_;
  GpuAugmentArgs args_;
  // nvJPEG's memory and the slots' images: a cudaFree waits for the whole device (block_pool.h).
  // Declared first, destroyed last: nvJPEG hands its blocks back when its handle dies.
  // Not stream-ordered: the hardware decoder writes when called, whatever its stream still runs.
  BlockPool device_pool_{BlockPool::Kind::kDevice, /*stream_ordered=*/false};
  BlockPool pinned_pool_{BlockPool::Kind::kPinned};
  bool hardware_ = false;
  std::vector<nvjpegHandle_t> handles_;  // owned: the slots' (one, or one a slot)
  nvjpegHandle_t probe_handle_ = nullptr;  // owned, with GpuDecodeTuning::probe_handle
  std::vector<Slot> slots_;
  std::atomic<int64_t> gpu_decoded_{0}, cpu_decoded_{0};
  std::atomic<int64_t> nvjpeg_us_{0}, decode_us_{0};
};

}  // namespace tally
