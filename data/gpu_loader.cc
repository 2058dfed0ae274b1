// GpuLoader's entry point: the config checks every build makes, then the nvJPEG
// implementation (data/gpu/nvjpeg_loader.cc) where the build has one.
#include "data/gpu_loader.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "ops/device.h"

namespace tally {

#ifdef TALLY_HAVE_NVJPEG
Status CreateNvjpegLoader(const GpuLoaderConfig& config, std::unique_ptr<GpuLoader>* out);
bool GpuDecodeBuilt() { return true; }
#else
bool GpuDecodeBuilt() { return false; }

Status MeasureGpuDecodeOverlap(const GpuLoaderConfig&, int, double, GpuDecodeOverlap*) {
  return Status::InvalidArgument("GPU loader: this Tally was built without nvJPEG");
}
#endif

Status ParseGpuDecodeTuning(const std::string& spec, GpuDecodeTuning* out) {
  GpuDecodeTuning t;
  std::stringstream words(spec);
  for (std::string w; std::getline(words, w, ',');) {
    if (w == "default" || w.empty()) {
    } else if (w == "standalone") {
      t.shared_handle = true;
      t.shared_state = true;
      t.decode_threads = 1;
      t.high_priority = false;
      t.probe_handle = true;
    } else if (w == "shared-handle") {
      t.shared_handle = true;
    } else if (w == "shared-state") {
      t.shared_state = true;
    } else if (w.rfind("threads=", 0) == 0) {
      char* end = nullptr;
      const long n = std::strtol(w.c_str() + 8, &end, 10);
      if (*end != '\0' || end == w.c_str() + 8 || n < 1 || n > 3) {
        return Status::InvalidArgument("GPU decode tuning '" + spec + "': " + w + " wants 1 to 3 threads");
      }
      t.decode_threads = static_cast<int>(n);
    } else if (w == "default-priority") {
      t.high_priority = false;
    } else if (w == "cuda-malloc") {
      t.pooled_memory = false;
    } else if (w == "probe-handle") {
      t.probe_handle = true;
    } else if (w == "pinned-input") {
      t.pinned_input = true;
    } else if (w == "no-preallocate") {
      t.preallocate = false;
    } else if (w == "yuv-output") {
      t.yuv_output = true;
    } else if (w == "init-once") {
      t.init_once = true;
    } else {
      return Status::InvalidArgument("GPU decode tuning '" + spec + "': unknown setting '" + w +
                                     "' (default, standalone, shared-handle, shared-state, threads=N, default-priority, "
                                     "cuda-malloc, probe-handle, pinned-input, no-preallocate, yuv-output, init-once)");
    }
  }
  *out = t;
  return Status::Ok();
}

std::string DescribeGpuDecodeTuning(const GpuDecodeTuning& t) {
  std::vector<std::string> words;
  if (t.shared_handle) words.push_back("shared-handle");
  if (t.shared_state) words.push_back("shared-state");
  if (t.decode_threads > 0) words.push_back("threads=" + std::to_string(t.decode_threads));
  if (!t.high_priority) words.push_back("default-priority");
  if (!t.pooled_memory) words.push_back("cuda-malloc");
  if (t.probe_handle) words.push_back("probe-handle");
  if (t.pinned_input) words.push_back("pinned-input");
  if (!t.preallocate) words.push_back("no-preallocate");
  if (t.yuv_output) words.push_back("yuv-output");
  if (t.init_once) words.push_back("init-once");
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ",") + w;
  return out.empty() ? "default" : out;
}

std::string DescribeGpuLoaderStats(const GpuLoaderStats& s) {
  char line[400];
  std::snprintf(line, sizeof line,
                "NextBatch waited %.2f s; the GPU thread waited %.2f s for CPU-prepared batches and %.2f s for a free "
                "buffer, and spent %.2f s queueing decodes (%.2f s in nvJPEG); %lld buffers from CUDA",
                s.consumer_wait_s, s.prep_wait_s, s.buffer_wait_s, s.decode_s, s.nvjpeg_s,
                static_cast<long long>(s.cuda_allocations));
  return line;
}

Status CheckGpuLoaderConfig(const GpuLoaderConfig& config) {
  if (config.dtype != DType::kF32 && config.dtype != DType::kF16 && config.dtype != DType::kBF16) {
    return Status::InvalidArgument(std::string("GPU loader: output dtype ") + DTypeName(config.dtype) +
                                   " is not supported (float32, float16 or bfloat16)");
  }
  if (config.channels != 3 && config.channels != 4) {
    return Status::InvalidArgument("GPU loader: channels must be 3, or 4 (RGB and a zero channel), not " +
                                   std::to_string(config.channels));
  }
  if (config.loader.label_width != 1) {
    return Status::InvalidArgument("GPU loader: label_width > 1 is not supported; use the CPU loader");
  }
  if (config.device < 0) return Status::InvalidArgument("GPU loader: device must be >= 0");
  if (config.buffers < 2 || config.buffers > 4) {
    return Status::InvalidArgument("GPU loader: buffers must be 2, 3 or 4, not " + std::to_string(config.buffers));
  }
  if (config.tuning.shared_state && config.tuning.decode_threads > 1) {
    return Status::InvalidArgument("GPU loader: one JPEG state (shared-state) is for one decode thread, not " +
                                   std::to_string(config.tuning.decode_threads));
  }
  if (config.tuning.decode_threads >= config.buffers) {
    return Status::InvalidArgument("GPU loader: " + std::to_string(config.tuning.decode_threads) +
                                   " decode threads need more than " + std::to_string(config.buffers) +
                                   " buffers (one is in use while the others are decoded)");
  }
  return Status::Ok();
}

Status GpuLoader::Create(const GpuLoaderConfig& config, std::unique_ptr<GpuLoader>* out) {
  TALLY_RETURN_IF_ERROR(CheckGpuLoaderConfig(config));
#ifdef TALLY_HAVE_NVJPEG
  if (config.device >= CudaDeviceCount()) {
    return Status::InvalidArgument("GPU loader: no cuda:" + std::to_string(config.device) + " (" +
                                   std::to_string(CudaDeviceCount()) + " CUDA devices visible)");
  }
  return CreateNvjpegLoader(config, out);
#else
  return Status::InvalidArgument(std::string("GPU loader: this Tally was built without nvJPEG") +
                                 (BuiltWithCuda() ? "" : " (and without CUDA)") +
                                 "; run tools/install_deps.sh and reconfigure, or use the CPU loader");
#endif
}

}  // namespace tally
