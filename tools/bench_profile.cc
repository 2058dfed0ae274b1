// `tally bench profile`: what the profiler costs. The same small dist_sync job (launched
// through tools/launch.py: a scheduler, servers and workers as processes on this machine)
// runs alternately without the profiler (no --run-dir, no monitor) and with all of it
// (--run-dir, --profile: step files, the system monitor every 500 ms, Chrome traces), and
// the median Speedometer throughput of each is compared. Alternating, and several pairs,
// keep a noisy machine's drift out of the ratio.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include <gflags/gflags.h>

#include "tools/bench.h"
#include "tools/command.h"

DECLARE_bool(json);
DECLARE_int32(workers);
DECLARE_int32(servers);
DEFINE_int32(pairs, 3, "runs without and with the profiler, alternating");
DEFINE_int32(profile_examples, 3200, "training examples per worker in each run");

namespace tally {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The Speedometer's samples/sec of every window but each worker's first two (start-up).
std::vector<double> Speeds(const std::string& log, int workers) {
  static const std::regex kSpeed(R"(Speed: ([0-9.]+) samples/sec)");
  std::vector<double> out;
  for (std::sregex_iterator it(log.begin(), log.end(), kSpeed), end; it != end; ++it) {
    out.push_back(std::stod((*it)[1].str()));
  }
  const size_t skip = std::min(out.size(), static_cast<size_t>(2 * workers));
  return std::vector<double>(out.begin() + static_cast<long>(skip), out.end());
}

}  // namespace

int BenchProfile(int argc, char** argv) {
  ParseFlags("tally bench profile [--workers 2 --servers 1 --pairs 3 --json]", &argc, &argv);
  // Two workers unless --workers says otherwise (its default, 1, is bench ps's).
  const int workers = gflags::GetCommandLineFlagInfoOrDie("workers").is_default ? 2 : std::max(1, FLAGS_workers);
  const int servers = std::max(1, FLAGS_servers);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "tally bench profile: cannot find this executable\n");
    return 1;
  }
  self[n] = '\0';
  char dir_template[] = "/tmp/tally-bench-profile-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::fprintf(stderr, "tally bench profile: cannot make a temporary directory\n");
    return 1;
  }
  const std::string run_dir = dir_template;
  const std::string base = std::string("OMP_WAIT_POLICY=passive python3 ") + TALLY_SOURCE_DIR +
                           "/tools/launch.py -n " + std::to_string(workers) + " -s " + std::to_string(servers) +
                           " --launcher local " + self +
                           " train --kv-store dist_sync --network resnet --num-layers 20 --image-shape 3,28,28"
                           " --batch-size 32 --num-epochs 1 --disp-batches 10 --num-val-examples 32 --num-examples " +
                           std::to_string(FLAGS_profile_examples) + " --progress=false";
  std::vector<double> off, on;
  for (int pair = 0; pair < FLAGS_pairs; ++pair) {
    for (bool profiled : {false, true}) {
      const std::string cmd = base + (profiled ? " --run-dir " + run_dir + "/" + std::to_string(pair) + " --profile"
                                               : " --monitor-interval-ms 0") + " 2>&1";
      bool ok = false;
      const std::string log = RunCapture(cmd, &ok);
      const std::vector<double> speeds = Speeds(log, workers);
      if (!ok || speeds.empty()) {
        std::fprintf(stderr, "tally bench profile: the job failed:\n%s\n%s\n", cmd.c_str(), log.c_str());
        return 1;
      }
      const double median = Median(speeds);
      (profiled ? on : off).push_back(median);
      std::fprintf(stderr, "run %d %s: %.1f samples/s per worker (median of %zu windows)\n", pair,
                   profiled ? "profiled" : "plain   ", median, speeds.size());
    }
  }
  std::string rm = "rm -rf " + run_dir;
  std::system(rm.c_str());
  BenchRow row;
  row.bench = "profile";
  row.name = "resnet20-dist_sync-" + std::to_string(workers) + "w" + std::to_string(servers) + "s-profiled";
  row.value = Median(on);
  row.unit = "img/s";
  row.peer = Median(off);
  row.peer_name = "the same job without the profiler";
  char note[96];
  std::snprintf(note, sizeof note, "profiling costs %.2f%% of throughput; goal <= 2%%",
                100.0 * (1.0 - row.value / row.peer));
  row.note = note;
  Report({row}, FLAGS_json);
  return 0;
}

}  // namespace tally
