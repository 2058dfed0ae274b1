// GpuLoader's entry point: the config checks every build makes, then the nvJPEG
// implementation (data/gpu/nvjpeg_loader.cc) where the build has one.
#include "data/gpu_loader.h"

#include <cstdio>

#include "ops/device.h"

namespace tally {

#ifdef TALLY_HAVE_NVJPEG
Status CreateNvjpegLoader(const GpuLoaderConfig& config, std::unique_ptr<GpuLoader>* out);
bool GpuDecodeBuilt() { return true; }
#else
bool GpuDecodeBuilt() { return false; }
#endif

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
