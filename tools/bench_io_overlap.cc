// `tally bench io --gpu --decode-overlap`: whether the GPU input path decodes beside other work on
// the device or waits for it. For each nvJPEG decoder and each way of driving it
// (GpuDecodeTuning), a process of its own measures milliseconds a batch on an idle device
// and beside 1 s of kernels filling every SM from another stream (the training step's
// shape), and beside a host function holding another stream (MeasureGpuDecodeOverlap). A
// decoder that runs beside the step shows a ratio near 1; one that waits for the device
// shows the busy time spread over the batches. One process per setting: a crash or a
// refused setting costs only its row, and each starts from a fresh device context.
//
//   tally bench io --gpu --decode-overlap --data train.rec [--json]
#include <cstdio>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>

#include "data/gpu_loader.h"
#include "ops/device.h"
#include "tools/bench.h"
#include "tools/bench_io.h"

DECLARE_bool(json);
DECLARE_int32(images);
DECLARE_int32(gpu_batch);
DECLARE_int32(gpu_prep_threads);
DEFINE_bool(decode_overlap, false,
            "bench io --gpu: measure whether the GPU input path decodes beside other work on the device, for each "
            "decoder and way of driving nvJPEG (docs/gpu.md, \"Decoding beside the step\")");
DEFINE_string(decode_overlap_only, "", "bench io --gpu --decode-overlap: one measurement, DECODER:TUNING, in this process (internal)");
DEFINE_int32(decode_overlap_batches, 8, "bench io --gpu --decode-overlap: batches timed in each of the three runs");
DEFINE_double(decode_overlap_busy_s, 1.0, "bench io --gpu --decode-overlap: seconds of busy work beside the decodes");

namespace tally {
namespace {

struct OverlapCase {
  std::string decoder;  // hardware or cuda
  std::string tuning;   // ParseGpuDecodeTuning's words
};

// Every setting on its own against the default for the hardware decoder, whose waits are in
// question; the cuda decoder's default, standalone and yuv-output settings for comparison
// (yuv-output spares it a pass on the SMs).
std::vector<OverlapCase> Cases() {
  std::vector<OverlapCase> cases;
  for (const char* t : {"default", "standalone", "shared-handle", "shared-state", "threads=1", "default-priority",
                        "cuda-malloc", "probe-handle", "pinned-input", "no-preallocate", "yuv-output", "init-once",
                        "standalone,pinned-input", "standalone,yuv-output"}) {
    cases.push_back({"hardware", t});
  }
  for (const char* t : {"default", "standalone", "yuv-output"}) cases.push_back({"cuda", t});
  return cases;
}

// The child: one measurement, printed as one JSON object on stdout.
Status MeasureOne(const std::string& dir, const std::string& only) {
  const size_t colon = only.find(':');
  const std::string decoder = only.substr(0, colon);
  if (colon == std::string::npos || (decoder != "hardware" && decoder != "cuda")) {
    return Status::InvalidArgument("--decode_overlap_only " + only + ": wants hardware:TUNING or cuda:TUNING");
  }
  GpuLoaderConfig cfg = BenchGpuLoaderConfig(dir);
  TALLY_RETURN_IF_ERROR(ParseGpuDecodeTuning(only.substr(colon + 1), &cfg.tuning));
  cfg.hardware_decoder = decoder == "hardware";
  GpuDecodeOverlap m;
  TALLY_RETURN_IF_ERROR(MeasureGpuDecodeOverlap(cfg, FLAGS_decode_overlap_batches, FLAGS_decode_overlap_busy_s, &m));
  const nlohmann::json j = {{"decoder", m.decoder},
                            {"idle_s", m.idle_s},
                            {"beside_host_s", m.beside_host_s},
                            {"beside_kernels_s", m.beside_kernels_s},
                            {"busy_kernels_s", m.busy_kernels_s},
                            {"nvjpeg_s", {m.nvjpeg_idle_s, m.nvjpeg_host_s, m.nvjpeg_kernels_s}},
                            {"stats", DescribeGpuLoaderStats(m.stats)}};
  std::printf("overlap %s\n", j.dump().c_str());
  std::fflush(stdout);
  return Status::Ok();
}

BenchRow RowFor(const OverlapCase& c, const std::string& child_out, bool ran) {
  BenchRow row;
  row.bench = "io";
  row.name = "gpu-decode-beside-kernels-" + c.decoder + "-" + c.tuning;
  row.unit = "ms/batch";
  row.lower_is_better = true;
  row.peer_name = "the same loader on an idle device";
  const size_t at = child_out.find("overlap {");
  if (!ran || at == std::string::npos) {
    row.value = -1;
    row.note = "the measurement failed (its log is above)";
    return row;
  }
  const nlohmann::json j =
      nlohmann::json::parse(child_out.substr(at + 8, child_out.find('\n', at) - at - 8), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("nvjpeg_s")) {
    row.value = -1;
    row.note = "the measurement printed an unreadable line";
    return row;
  }
  const double per = 1e3 / FLAGS_decode_overlap_batches;
  row.value = j["beside_kernels_s"].get<double>() * per;
  row.peer = j["idle_s"].get<double>() * per;
  char note[1024];
  std::snprintf(note, sizeof note,
                "nvJPEG %s decoder; beside a %.1f s host function %.1f ms/batch; the kernels held the SMs %.2f s; "
                "in nvjpegDecodeBatched %.1f ms/batch idle, %.1f beside the host function, %.1f beside the kernels; "
                "%s",
                j["decoder"].get<std::string>().c_str(), FLAGS_decode_overlap_busy_s,
                j["beside_host_s"].get<double>() * per, j["busy_kernels_s"].get<double>(),
                j["nvjpeg_s"][0].get<double>() * per, j["nvjpeg_s"][1].get<double>() * per,
                j["nvjpeg_s"][2].get<double>() * per, j["stats"].get<std::string>().c_str());
  row.note = note;
  return row;
}

}  // namespace

Status BenchGpuOverlap(const std::string& dir, std::vector<BenchRow>* rows) {
  if (!GpuDecodeBuilt()) return Status::InvalidArgument("bench io --gpu: this Tally was built without nvJPEG");
  TALLY_RETURN_IF_ERROR(CheckDevice(Device{Device::Kind::kCuda, 0}));
  if (!FLAGS_decode_overlap_only.empty()) return MeasureOne(dir, FLAGS_decode_overlap_only);
  const std::string self = SelfExecutable();
  if (self.empty()) return Status::IoError("bench io --decode-overlap: cannot find this executable (/proc/self/exe)");
  const std::vector<OverlapCase> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const OverlapCase& c = cases[i];
    std::fprintf(stderr, "  overlap %zu/%zu: %s decoder, %s\n", i + 1, cases.size(), c.decoder.c_str(),
                 c.tuning.c_str());
    const std::string cmd = "'" + self + "' bench io --gpu --decode-overlap --json --decode_overlap_only='" + c.decoder + ":" + c.tuning +
                            "' --data='" + dir + "/images.rec' --images=" + std::to_string(FLAGS_images) +
                            " --gpu_batch=" + std::to_string(FLAGS_gpu_batch) +
                            " --gpu_prep_threads=" + std::to_string(FLAGS_gpu_prep_threads) +
                            " --decode_overlap_batches=" + std::to_string(FLAGS_decode_overlap_batches) +
                            " --decode_overlap_busy_s=" + std::to_string(FLAGS_decode_overlap_busy_s);
    bool ok = false;
    const std::string out = RunCapture(cmd, &ok);
    rows->push_back(RowFor(c, out, ok));
    if (!FLAGS_json) {
      std::fprintf(stderr, "    %.1f ms/batch beside kernels, %.1f idle\n", rows->back().value, rows->back().peer);
    }
  }
  return Status::Ok();
}

}  // namespace tally
