// MeasureGpuDecodeOverlap (data/gpu_loader.h): a loader's batches timed on an idle device and
// beside busy work on another stream. The loader decodes buffers - 1 batches ahead, so the
// first batches of each run may have been decoded before the work began; asking for several
// times that many keeps most of each run's decodes inside it.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "data/gpu/busy_device.h"
#include "data/gpu_loader.h"
#include "ops/device.h"
#include "profile/thread_stacks.h"

namespace tally {
namespace {

// Seconds for `batches` batches, each waited for on the device's stream as a step would,
// and the seconds the loader's threads spent in nvjpegDecodeBatched meanwhile. A run still
// going after `sample_after` seconds writes every thread's stack to stderr once: where the
// loader waits (the decode threads are named gpu-decode-N).
Status TimeBatches(GpuLoader& loader, const Device& gpu, int batches, double sample_after, double* seconds,
                   double* nvjpeg_seconds) {
  Batch b;
  const double nvjpeg0 = loader.stats().nvjpeg_s;
  const auto t0 = std::chrono::steady_clock::now();
  {
    StackSampler sampler(sample_after, STDERR_FILENO);
    for (int i = 0; i < batches; ++i) {
      TALLY_RETURN_IF_ERROR(loader.NextBatch(&b));
      Synchronize(gpu);
    }
    if (sampler.dumped()) std::fprintf(stderr, "--- (the stacks above: the run outlived %.2f s)\n", sample_after);
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *nvjpeg_seconds = loader.stats().nvjpeg_s - nvjpeg0;
  return Status::Ok();
}

}  // namespace

Status MeasureGpuDecodeOverlap(const GpuLoaderConfig& config, int batches, double busy_seconds,
                               GpuDecodeOverlap* out) {
  if (batches < 1 || busy_seconds <= 0) {
    return Status::InvalidArgument("GPU decode overlap: batches and busy seconds must be positive");
  }
  std::unique_ptr<GpuLoader> loader;
  TALLY_RETURN_IF_ERROR(GpuLoader::Create(config, &loader));
  out->decoder = loader->decoder();
  const Device gpu{Device::Kind::kCuda, config.device};
  // Warm-up: the pools, nvJPEG's buffers and the prep threads reach their steady state.
  double ignored = 0, never = 1e9;
  TALLY_RETURN_IF_ERROR(TimeBatches(*loader, gpu, 2 * config.buffers, never, &ignored, &ignored));
  TALLY_RETURN_IF_ERROR(TimeBatches(*loader, gpu, batches, never, &out->idle_s, &out->nvjpeg_idle_s));
  BusyDevice busy(config.device);
  busy.HostFunction(busy_seconds);
  TALLY_RETURN_IF_ERROR(
      TimeBatches(*loader, gpu, batches, busy_seconds / 2, &out->beside_host_s, &out->nvjpeg_host_s));
  busy.Wait();
  busy.Kernels(busy_seconds);
  TALLY_RETURN_IF_ERROR(
      TimeBatches(*loader, gpu, batches, busy_seconds / 2, &out->beside_kernels_s, &out->nvjpeg_kernels_s));
  out->busy_kernels_s = busy.Wait();
  out->stats = loader->stats();
  return Status::Ok();
}

}  // namespace tally
