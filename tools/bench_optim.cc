// `tally bench optim`: the servers' update speed per optimizer, in GB/s of pushed fp32
// gradient bytes (what one slice's update consumes), against SGD with momentum in the same
// run: one Updater on one key of --mb megabytes, as a server applies a summed push, the best
// of --iters updates after one to allocate the state.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "optim/updater.h"
#include "tools/bench.h"

namespace tally {
namespace {

// Seconds of the fastest of `iters` updates of a key of n elements under config.
double BestUpdateSeconds(const OptimizerConfig& config, int64_t n, int iters) {
  Updater u(config);
  Tensor w = Tensor::Empty({n}, DType::kF32), g = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    w.data<float>()[i] = 0.01f * static_cast<float>(i % 101);
    g.data<float>()[i] = 1e-3f * static_cast<float>(i % 37) - 0.01f;
  }
  u.Update(0, g, &w);  // allocates the state
  double best = 1e30;
  for (int it = 0; it < iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    u.Update(0, g, &w);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int BenchOptim(int argc, char** argv) {
  bool json = false;
  int64_t mb = 64;
  int iters = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strncmp(argv[i], "--mb=", 5) == 0) {
      mb = std::atoll(argv[i] + 5);
    } else if (std::strncmp(argv[i], "--iters=", 8) == 0) {
      iters = std::atoi(argv[i] + 8);
    } else {
      std::fprintf(stderr, "usage: tally bench optim [--json] [--mb=64] [--iters=5]\n");
      return 2;
    }
  }
  if (mb < 1 || iters < 1) {
    std::fprintf(stderr, "tally bench optim: --mb and --iters must be positive\n");
    return 2;
  }
  const int64_t n = mb * (int64_t{1} << 20) / 4;
  const double bytes = static_cast<double>(n) * 4;
  OptimizerConfig sgd;
  const double sgd_gbs = bytes / BestUpdateSeconds(sgd, n, iters) / 1e9;
  std::vector<BenchRow> rows;
  for (const std::string& type : KnownOptimizers()) {
    OptimizerConfig c;
    c.type = type;
    BenchRow r;
    r.bench = "optim";
    r.name = type + "-" + std::to_string(mb) + "MB-fp32";
    r.value = type == "sgd" ? sgd_gbs : bytes / BestUpdateSeconds(c, n, iters) / 1e9;
    r.unit = "GB/s";
    r.peer = sgd_gbs;
    r.peer_name = "sgd momentum 0.9";
    r.note = std::to_string(OptimizerStateSlots(WithDefaults(c))) + " state slots";
    rows.push_back(r);
  }
  Report(rows, json);
  return 0;
}

}  // namespace tally
