// The subcommands of the `tally` executable. Each is a function taking the arguments after
// its name (argv[0] is "tally <name>") and returning the process exit code.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

int TrainCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);
int Im2recCommand(int argc, char** argv);
int RecCommand(int argc, char** argv);
int MakeDataCommand(int argc, char** argv);
int ExportCommand(int argc, char** argv);
int PredictCommand(int argc, char** argv);
int ReportCommand(int argc, char** argv);
int PlanCommand(int argc, char** argv);

struct ClusterConfig;  // net/cluster.h
// A job command started by tools/launch.py as a scheduler or a server (DMLC_ROLE) runs that
// role until the job ends, as in MXNet; returns the process's exit code. With --run-dir it
// profiles itself too (the profiler's flags).
int RunRole(const ClusterConfig& c);

// gflags wants underscores; MXNet's users type dashes (--num-layers). Rewrites every
// "--a-b[=v]" argument's name in place to "--a_b[=v]", then parses the flags; an unknown
// flag is refused naming it. `--help` (or -h) prints `usage` and the flags defined in
// `flag_files` (the command's own sources: __FILE__, or paths ending so), one line each, and
// exits 0; `--helpfull` lists every flag, the logging library's included.
//
//   ParseFlags("tally rec FILE.rec [--verify]", &argc, &argv, {__FILE__});
void ParseFlags(const std::string& usage, int* argc, char*** argv, const std::vector<std::string>& flag_files);

// Parses MXNet's --image-shape "C,H,W"; the error names the flag.
Status ParseImageShape(const std::string& text, Shape* chw);
// Parses MXNet's --gpus "0,2" into CUDA device indices, each checked to exist in this build
// and on this machine; the error names the flag, the device and why it cannot be used.
Status ParseGpus(const std::string& text, std::vector<int>* gpus);

}  // namespace tally
