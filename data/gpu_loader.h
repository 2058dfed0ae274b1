// The GPU input path: Loader's job (data/loader.h) with the JPEG decode and the
// augmentation on the GPU. Records are read, unpacked and planned on CPU threads with the
// same sharding, permutation and per-sample seeds as Loader, so the same records get the same
// crops, mirrors and colour factors; nvJPEG decodes each batch on the GPU (its hardware
// decoder where the GPU has one, e.g. A100/H100, else its GPU-assisted decoder); one kernel
// then crops, resizes, mirrors, applies the colour jitter and PCA noise, normalises and
// writes NHWC fp32/fp16/bf16, with 3 channels or 4 (a zero 4th, as the GPU network takes).
//
//   GpuLoaderConfig cfg;
//   cfg.loader.rec_path = "train.rec";  cfg.loader.idx_path = "train.idx";
//   cfg.loader.batch_size = 256;  cfg.loader.augment = AugmentParams::ImageNetTrain();
//   cfg.dtype = DType::kF16;  cfg.channels = 4;
//   std::unique_ptr<GpuLoader> loader;
//   TALLY_RETURN_IF_ERROR(GpuLoader::Create(cfg, &loader));   // fails without nvJPEG or GPU
//   Batch batch;
//   TALLY_RETURN_IF_ERROR(loader->NextBatch(&batch));   // images [256,224,224,4] f16 on cuda:0
//   ... work on batch.images, queued on the device's stream (ops/cuda/context.h) ...
//
// Buffering: `buffers` output buffers (3 by default). NextBatch makes the device's stream wait
// (an event, no host wait) for the batch's kernels, and marks the batch before it as consumed
// by the work queued on that stream so far; the decodes of the next buffers - 1 batches thus
// overlap the work on batch n. A batch's images are overwritten `buffers` NextBatch calls
// later: copy them to keep them.
//
// Differences from the CPU Loader, which stays the reference (docs/gpu.md has the numbers):
//   - JPEGs are decoded at full size (no DCT scaling) and by another decoder, so pixels differ
//     by the decoders' IDCT and chroma-upsampling rounding; compare against a Loader with
//     augment.dct_scaling = false.
//   - What nvJPEG cannot decode on the GPU (PNG, grayscale, CMYK, progressive JPEGs for the
//     hardware decoder) is decoded by libjpeg-turbo on the CPU threads and uploaded; a batch
//     nvJPEG fails on is decoded that way too. A record neither can read is a bad record,
//     handled as Loader does (replaced, counted, max_bad_fraction).
//   - output is ignored (dtype says it); label_width > 1 and u8 output are refused.
//
// Thread-safety: NextBatch is called by one thread at a time. The destructor stops the
// threads and waits for the GPU work it queued.
#pragma once

#include <memory>
#include <string>

#include "data/loader.h"
#include "base/dtype.h"
#include "base/status.h"

namespace tally {

// How the loader drives nvJPEG. The defaults are the loader's normal way; each other setting
// changes one thing, so that `tally bench io --gpu --decode-overlap` can tell which of them makes a
// decode wait for unrelated work on the device (docs/gpu.md, "Decoding beside the step"),
// and a training job can be run with one (tally train --gpu-decode-tuning, ParseGpuDecodeTuning).
struct GpuDecodeTuning {
  bool shared_handle = false;   // one nvJPEG handle for every buffer (default: one each)
  bool shared_state = false;    // one JPEG state, stream and handle for every buffer: one thread
  int decode_threads = 0;       // threads calling nvjpegDecodeBatched; 0: buffers - 1 (1 if shared_state)
  bool high_priority = true;    // decode streams at the device's greatest priority
  bool pooled_memory = true;    // nvJPEG draws on the caching pools (else cudaMalloc/cudaFree)
  bool probe_handle = false;    // the CPU threads parse headers on a handle of their own
  bool pinned_input = false;    // bitstreams copied into page-locked memory before decoding
  bool preallocate = true;      // nvjpegDecodeBatchedPreAllocate for the largest image seen
  bool yuv_output = false;      // nvJPEG writes the YCbCr planes; the augmentation converts
  bool init_once = false;       // nvjpegDecodeBatchedInitialize only when the batch size changes
};

// "default", or settings joined by commas: shared-handle, shared-state, threads=N,
// default-priority, cuda-malloc, probe-handle, pinned-input, no-preallocate, yuv-output,
// init-once; "standalone" is shared-handle, shared-state, threads=1, default-priority,
// probe-handle (one thread, handle, state and stream decoding, as a program of its own
// would). An unknown word is an error naming it.
Status ParseGpuDecodeTuning(const std::string& spec, GpuDecodeTuning* out);
// The settings that differ from the defaults in ParseGpuDecodeTuning's words, threads=N
// last ("default" when none differ).
std::string DescribeGpuDecodeTuning(const GpuDecodeTuning& t);

struct GpuLoaderConfig {
  LoaderConfig loader;      // records, sharding, seeds, augmentation, CPU threads, prefetch
  int device = 0;           // cuda:device
  DType dtype = DType::kF16;  // kF32, kF16 or kBF16
  int channels = 3;         // 3, or 4 with a zero 4th channel
  // Use the GPU's hardware JPEG decoder when nvJPEG offers it. Off: the GPU-assisted one.
  bool hardware_decoder = true;
  // Output buffers, 2 to 4: the batch in use plus the ones decoded ahead of it. Each holds a
  // batch in `dtype` (77 MB for 256 fp16 images of 224x224x3).
  int buffers = 3;
  GpuDecodeTuning tuning;
};

struct GpuLoaderStats {
  LoaderStats loader;
  int64_t gpu_decoded = 0;  // images nvJPEG decoded
  int64_t cpu_decoded = 0;  // images libjpeg-turbo decoded (unsupported or failed on the GPU)
  // Where the time went, in seconds of each thread (the answer when training waits for data):
  double consumer_wait_s = 0;  // NextBatch waiting for a batch
  double prep_wait_s = 0;      // the GPU thread waiting for the CPU threads' next batch
  double buffer_wait_s = 0;    // the GPU thread waiting for a free output buffer
  double decode_s = 0;         // the GPU thread queueing decodes and augmentation
  double nvjpeg_s = 0;         //   of which in nvjpegDecodeBatched
  int64_t cuda_allocations = 0;  // buffers taken from CUDA: steady after the first batches
};

// One line saying where the loader's threads spent their time, e.g. "NextBatch waited 0.4 s;
// the GPU thread waited 0.1 s for CPU-prepared batches and 2.3 s for a free buffer, and spent
// 0.9 s queueing decodes (0.7 s in nvJPEG); 14 buffers from CUDA".
std::string DescribeGpuLoaderStats(const GpuLoaderStats& s);

// Whether this build has the GPU input path (CUDA and nvJPEG were found when it was built).
bool GpuDecodeBuilt();

class GpuLoader {
 public:
  // Fails, saying why, for a config the GPU path does not support, in a build without nvJPEG
  // ("built without nvJPEG"), without that GPU, or when the pack cannot be opened.
  static Status Create(const GpuLoaderConfig& config, std::unique_ptr<GpuLoader>* out);
  virtual ~GpuLoader() = default;

  // Blocks until the next batch is queued on the GPU. batch->images is on cuda:device,
  // [B, H, W, channels] in dtype; labels are host int32, as Loader's.
  virtual Status NextBatch(Batch* batch) = 0;

  virtual int64_t batches_per_epoch() const = 0;
  virtual GpuLoaderStats stats() const = 0;
  // "hardware" or "gpu-hybrid": which nvJPEG backend decodes.
  virtual std::string decoder() const = 0;
};

// The checks Create makes on the config before it looks for a GPU (exposed for tests).
Status CheckGpuLoaderConfig(const GpuLoaderConfig& config);

// What a batch's decode waits for. A loader made from `config` hands out `batches` batches
// (each waited for on the device's stream, as a step would) three times: on an idle device,
// beside a host function holding another stream for `busy_seconds`, and beside that long of
// short kernels filling every SM from another stream (a training step's shape: blocks
// retire every 0.1 ms, so higher-priority work gets in). A decoder that runs beside the step
// takes about as long beside either as idle; one that waits for the device takes the busy
// time, and then every thread's stack is written to stderr halfway through the busy time,
// saying where it waits (data/gpu/decode_overlap.cc).
struct GpuDecodeOverlap {
  std::string decoder;          // GpuLoader::decoder()
  double idle_s = 0, beside_host_s = 0, beside_kernels_s = 0;  // each for `batches` batches
  double busy_kernels_s = 0;    // how long the kernels kept the SMs (measured on the device)
  // Seconds in nvjpegDecodeBatched during each run (its calls, summed over the decode threads).
  double nvjpeg_idle_s = 0, nvjpeg_host_s = 0, nvjpeg_kernels_s = 0;
  GpuLoaderStats stats;         // over the three runs
};
Status MeasureGpuDecodeOverlap(const GpuLoaderConfig& config, int batches, double busy_seconds,
                               GpuDecodeOverlap* out);

}  // namespace tally
