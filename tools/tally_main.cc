// tally: the one executable. `tally <command> [flags]`; `tally <command> --help` lists flags.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <glog/logging.h>

#include "tools/command.h"
#include "tools/fault_env.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"train", tally::TrainCommand, "train a ResNet (MXNet image-classification flags)"},
    {"bench", tally::BenchCommand, "measure Tally against its peer: `tally bench compute`"},
    {"im2rec", tally::Im2recCommand, "list images (--list) or pack them into RecordIO, as MXNet's im2rec"},
    {"rec", tally::RecCommand, "inspect a RecordIO file: records, headers; --verify checks every record"},
    {"make-data", tally::MakeDataCommand, "make data sets: fashion-mnist (.rec) or synthetic-jpeg (a folder)"},
    {"export", tally::ExportCommand, "convert a checkpoint's .params into safetensors for PyTorch's ResNet"},
    {"predict", tally::PredictCommand, "a model's logits for images in an NDArray file, to check it against MXNet"},
    {"plan", tally::PlanCommand, "predict a ResNet-50 job's step time and scaling; recommend a server count"},
    {"report", tally::ReportCommand, "a profiled run (train --run-dir) as one HTML page; --merge: one Chrome trace"},
};

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: tally <command> [flags]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`tally <command> --help` lists a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  // ZeroMQ mallocs every received frame. glibc would serve big ones with fresh mmaps, which
  // fault in every 4 KiB page again for every message; keeping freed memory in the heap
  // lets the next frame of the same size reuse pages that are already there. One arena:
  // the per-thread arenas cannot hold big blocks and would mmap them regardless.
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      std::string name = std::string("tally ") + c.name;
      // The end-to-end tests' fault settings: read here alone, so that no library reads them.
      tally::FaultHooks hooks;
      tally::Status s = tally::FaultHooksFromEnv(&hooks);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), s.ToString().c_str());
        return 2;
      }
      tally::SetFaultHooks(hooks);
      argv[1] = name.data();
      return c.run(argc - 1, argv + 1);
    }
  }
  std::fprintf(stderr, "tally: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
