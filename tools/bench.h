// The harness of `tally bench <case>`: each case measures Tally and, in the same run, its
// peer or the physical limit, and reports through Report (a readable table, or with
// --json one JSON object per line and measurement: BenchRow's fields; README.md, "Tests and
// benchmarks").
#pragma once

#include <string>
#include <vector>

namespace tally {

struct BenchRow {
  std::string bench;      // "compute"
  std::string name;       // "resnet50-b32-224-fp32"
  double value = 0;       // Tally's figure
  std::string unit;       // "img/s"
  double peer = -1;       // the peer's figure in the same run; < 0: not measured
  std::string peer_name;  // "pytorch-1.13.1 channels_last"
  std::string note;       // anything else worth a column
  bool lower_is_better = false;  // times: ratio = peer / value, so that above 1 is better
  bool peer_is_limit = false;    // the reference is a physical limit, not another tool
};

// Prints rows as a table (to stdout) or as JSON lines. ratio = value / peer, or peer / value
// for rows where lower is better: above 1, Tally is ahead.
void Report(const std::vector<BenchRow>& rows, bool json);

// Runs a shell command and returns its standard output; *ok is false when it failed.
std::string RunCapture(const std::string& command, bool* ok);

// Where the helper scripts (tools/bench/*.py, tools/launch.py) are: $TALLY_HOME when set
// (the relocatable bundle's bin/tally sets it to the bundle), else the source tree this
// binary was built from.
std::string TallyHome();
// This executable's path (/proc/self/exe), or "" when it cannot be read.
std::string SelfExecutable();

int BenchCompute(int argc, char** argv);
int BenchPs(int argc, char** argv);
int BenchOptim(int argc, char** argv);
int BenchIo(int argc, char** argv);
int BenchProfile(int argc, char** argv);
int BenchReplay(int argc, char** argv);
int BenchScaling(int argc, char** argv);

// Limits measured on this machine in the same run (tools/bench_tcp.cc).
double TcpStreamGBps(size_t total_bytes);                      // one loopback TCP stream
double TcpRoundTripMedianUs(size_t bytes, int iterations);     // request and echo of `bytes`

}  // namespace tally
