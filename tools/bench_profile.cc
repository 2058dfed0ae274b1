// `tally bench profile`: what the profiler costs. A small dist_sync job (launched through
// tools/launch.py: a scheduler, servers and workers as processes on this machine) runs with
// --profile and --profile-overhead-blocks: every node turns its trace and its step files on
// for 10 steps and off for the next 10, in step with the others, and each worker prints
// the median step time of each half. Comparing halves of one run, interleaved, keeps the
// machine's drift and the run-to-run spread (several percent on a shared machine) out of
// a figure that is meant to be below 2%. The system monitor and the step timing run in
// both halves: their cost is the monitor's 0.1 ms per 500 ms sample and a few µs a step.
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
DEFINE_int32(runs, 3, "jobs run, each alternating the profiler on and off");
DEFINE_int32(profile_examples, 19200, "training examples per worker in each job");

namespace tally {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Halves {
  double on_ms, off_ms, pair_ratio;
  int pairs;
};

// The workers' "profiler overhead" lines (NodeProfiler::Finish).
std::vector<Halves> ParseHalves(const std::string& log) {
  static const std::regex kLine(R"(profiler overhead: worker-\d+: on \d+ steps median ([0-9.]+) ms, off \d+ steps median ([0-9.]+) ms, (\d+) block pairs median ratio ([0-9.]+))");
  std::vector<Halves> out;
  for (std::sregex_iterator it(log.begin(), log.end(), kLine), end; it != end; ++it) {
    out.push_back({std::stod((*it)[1].str()), std::stod((*it)[2].str()), std::stod((*it)[4].str()),
                   std::stoi((*it)[3].str())});
  }
  return out;
}

}  // namespace

int BenchProfile(int argc, char** argv) {
  ParseFlags("tally bench profile [--workers 2 --servers 1 --runs 3 --json]", &argc, &argv, {__FILE__});
  // Two workers unless --workers says otherwise (its default, 1, is bench ps's).
  const int workers = gflags::GetCommandLineFlagInfoOrDie("workers").is_default ? 2 : std::max(1, FLAGS_workers);
  const int servers = std::max(1, FLAGS_servers);
  const std::string self = SelfExecutable();
  if (self.empty()) {
    std::fprintf(stderr, "tally bench profile: cannot find this executable\n");
    return 1;
  }
  char dir_template[] = "/tmp/tally-bench-profile-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::fprintf(stderr, "tally bench profile: cannot make a temporary directory\n");
    return 1;
  }
  const std::string run_dir = dir_template;
  const std::string base = std::string("OMP_WAIT_POLICY=passive python3 ") + TallyHome() +
                           "/tools/launch.py -n " + std::to_string(workers) + " -s " + std::to_string(servers) +
                           " --launcher local " + self +
                           " train --kv-store dist_sync --network resnet --num-layers 20 --image-shape 3,28,28"
                           " --batch-size 32 --num-epochs 1 --disp-batches 10 --num-val-examples 32 --num-examples " +
                           std::to_string(FLAGS_profile_examples) + " --progress=false";
  std::vector<double> on, off, ratios;
  for (int run = 0; run < FLAGS_runs; ++run) {
    const std::string cmd = base + " --run-dir " + run_dir + "/" + std::to_string(run) +
                            " --profile --profile-overhead-blocks 10 2>&1";
    bool ok = false;
    const std::string log = RunCapture(cmd, &ok);
    const std::vector<Halves> halves = ParseHalves(log);
    if (!ok || static_cast<int>(halves.size()) != workers) {
      std::fprintf(stderr, "tally bench profile: the job failed:\n%s\n%s\n", cmd.c_str(), log.c_str());
      return 1;
    }
    for (const Halves& h : halves) {
      on.push_back(h.on_ms);
      off.push_back(h.off_ms);
      ratios.push_back(h.pair_ratio);
      std::fprintf(stderr, "run %d: median step %.3f ms profiled, %.3f ms not; over %d pairs of blocks: %+.2f%%\n",
                   run, h.on_ms, h.off_ms, h.pairs, 100.0 * (h.pair_ratio - 1));
    }
  }
  std::string rm = "rm -rf " + run_dir;
  std::system(rm.c_str());
  BenchRow row;
  row.bench = "profile";
  row.name = "resnet20-dist_sync-" + std::to_string(workers) + "w" + std::to_string(servers) + "s-profiled";
  row.value = Median(on);
  row.unit = "ms/step";
  row.lower_is_better = true;
  row.peer = Median(off);
  row.peer_name = "the same steps with the profiler off";
  char note[96];
  std::snprintf(note, sizeof note, "profiling costs %.2f%% of the step time (paired blocks); goal <= 2%%",
                100.0 * (Median(ratios) - 1.0));
  row.note = note;
  Report({row}, FLAGS_json);
  return 0;
}

}  // namespace tally
