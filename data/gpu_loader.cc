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

namespace {

// The on/off settings: each word sets its field to the value the default lacks.
struct Switch {
  const char* word;
  bool GpuDecodeTuning::*field;
  bool value;
};
constexpr Switch kSwitches[] = {
    {"shared-handle", &GpuDecodeTuning::shared_handle, true},
    {"shared-state", &GpuDecodeTuning::shared_state, true},
    {"default-priority", &GpuDecodeTuning::high_priority, false},
    {"cuda-malloc", &GpuDecodeTuning::pooled_memory, false},
    {"probe-handle", &GpuDecodeTuning::probe_handle, true},
    {"pinned-input", &GpuDecodeTuning::pinned_input, true},
    {"no-preallocate", &GpuDecodeTuning::preallocate, false},
    {"yuv-output", &GpuDecodeTuning::yuv_output, true},
    {"init-once", &GpuDecodeTuning::init_once, true},
};

Status ParseTuningWord(const std::string& spec, const std::string& w, GpuDecodeTuning* t) {
  if (w == "default" || w.empty()) return Status::Ok();
  if (w == "standalone") {
    t->shared_handle = t->shared_state = t->probe_handle = true;
    t->high_priority = false;
    t->decode_threads = 1;
    return Status::Ok();
  }
  for (const Switch& s : kSwitches) {
    if (w == s.word) {
      t->*s.field = s.value;
      return Status::Ok();
    }
  }
  if (w.rfind("threads=", 0) == 0) {
    char* end = nullptr;
    const long n = std::strtol(w.c_str() + 8, &end, 10);
    if (*end != '\0' || end == w.c_str() + 8 || n < 1 || n > 3) {
      return Status::InvalidArgument("GPU decode tuning '" + spec + "': " + w + " wants 1 to 3 threads");
    }
    t->decode_threads = static_cast<int>(n);
    return Status::Ok();
  }
  std::string known = "default, standalone, threads=N";
  for (const Switch& s : kSwitches) known += std::string(", ") + s.word;
  return Status::InvalidArgument("GPU decode tuning '" + spec + "': unknown setting '" + w + "' (" + known + ")");
}

}  // namespace

Status ParseGpuDecodeTuning(const std::string& spec, GpuDecodeTuning* out) {
  GpuDecodeTuning t;
  std::stringstream words(spec);
  for (std::string w; std::getline(words, w, ',');) TALLY_RETURN_IF_ERROR(ParseTuningWord(spec, w, &t));
  *out = t;
  return Status::Ok();
}

std::string DescribeGpuDecodeTuning(const GpuDecodeTuning& t) {
  std::string out;
  for (const Switch& s : kSwitches) {
    if (t.*s.field == s.value) out += std::string(out.empty() ? "" : ",") + s.word;
  }
  if (t.decode_threads > 0) out += (out.empty() ? "" : ",") + std::string("threads=") + std::to_string(t.decode_threads);
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
