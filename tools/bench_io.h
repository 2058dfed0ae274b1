// The pieces `tally bench io --gpu` (tools/bench_io.cc) shares with its --decode-overlap mode
// (tools/bench_io_overlap.cc).
//
//   GpuLoaderConfig cfg = BenchGpuLoaderConfig(dir);   // dir/images.rec, as bench io writes it
#pragma once

#include <string>
#include <vector>

#include "data/gpu_loader.h"
#include "tools/bench.h"

namespace tally {

// The GPU loader bench io measures: dir/images.rec at --gpu_batch with --gpu_prep_threads,
// ImageNet training augmentation to [B,224,224,4] fp16 on cuda:0.
GpuLoaderConfig BenchGpuLoaderConfig(const std::string& dir);

// bench io --gpu --decode-overlap: a row per decoder and tuning (tools/bench_io_overlap.cc).
Status BenchGpuOverlap(const std::string& dir, std::vector<BenchRow>* rows);

}  // namespace tally
