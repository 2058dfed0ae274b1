#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tools/bench.h"
#include "tools/command.h"

namespace tally {

static std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

void Report(const std::vector<BenchRow>& rows, bool json) {
  auto ratio = [](const BenchRow& r) { return r.lower_is_better ? r.peer / r.value : r.value / r.peer; };
  if (json) {
    for (const BenchRow& r : rows) {
      std::printf("{\"bench\": \"%s\", \"case\": \"%s\", \"value\": %.4g, \"unit\": \"%s\"",
                  JsonEscape(r.bench).c_str(), JsonEscape(r.name).c_str(), r.value, JsonEscape(r.unit).c_str());
      if (r.peer > 0) {
        const char* kind = r.peer_is_limit ? "limit" : "peer";
        std::printf(", \"%s\": %.4g, \"%s_name\": \"%s\", \"ratio\": %.3f", kind, r.peer, kind,
                    JsonEscape(r.peer_name).c_str(), ratio(r));
      } else {
        std::printf(", \"peer\": null, \"ratio\": null");
      }
      if (!r.note.empty()) std::printf(", \"note\": \"%s\"", JsonEscape(r.note).c_str());
      std::printf("}\n");
    }
    std::fflush(stdout);
    return;
  }
  std::printf("%-40s %12s %-6s %12s %7s  %s\n", "case", "tally", "unit", "peer", "ratio", "peer or limit / note");
  for (const BenchRow& r : rows) {
    if (r.peer > 0) {
      std::printf("%-40s %12.3f %-6s %12.3f %6.2fx  %s%s%s\n", r.name.c_str(), r.value, r.unit.c_str(), r.peer,
                  ratio(r), r.peer_name.c_str(), r.note.empty() ? "" : "; ", r.note.c_str());
    } else {
      std::printf("%-40s %12.3f %-6s %12s %7s  %s\n", r.name.c_str(), r.value, r.unit.c_str(), "-", "-",
                  r.note.c_str());
    }
  }
  std::fflush(stdout);
}

std::string RunCapture(const std::string& command, bool* ok) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) {
    *ok = false;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *ok = pclose(p) == 0;
  return out;
}

std::string SelfExecutable() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return std::string();
  self[n] = '\0';
  return self;
}

std::string TallyHome() {
  const char* home = std::getenv("TALLY_HOME");
  return home != nullptr && *home != '\0' ? home : TALLY_SOURCE_DIR;
}

int BenchCommand(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "compute") == 0) {
    std::string name = "tally bench compute";
    argv[1] = name.data();
    return BenchCompute(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "ps") == 0) {
    std::string name = "tally bench ps";
    argv[1] = name.data();
    return BenchPs(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "optim") == 0) {
    std::string name = "tally bench optim";
    argv[1] = name.data();
    return BenchOptim(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "io") == 0) {
    std::string name = "tally bench io";
    argv[1] = name.data();
    return BenchIo(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "replay") == 0) {
    std::string name = "tally bench replay";
    argv[1] = name.data();
    return BenchReplay(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "scaling") == 0) {
    std::string name = "tally bench scaling";
    argv[1] = name.data();
    return BenchScaling(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "profile") == 0) {
    std::string name = "tally bench profile";
    argv[1] = name.data();
    return BenchProfile(argc - 1, argv + 1);
  }
  std::fprintf(stderr,
               "usage: tally bench compute [--json] [--threads=2] [--steps=3] [--cases=resnet50,resnet20]\n"
               "       tally bench ps [--json] [--workers=1] [--servers=1] [--iters=20]\n"
               "       tally bench optim [--json] [--mb=64] [--iters=5]\n"
               "       tally bench io [--json] [--images=512] [--threads=1,2] [--data=DIR|FILE.rec]\n"
               "       tally bench profile [--json] [--workers=2] [--servers=1] [--runs=3]\n"
               "       tally bench scaling [--json] [--workers 1,2,4,8] [--wires fp16,fp32] [--scale 40] ...\n");
  return 2;
}

}  // namespace tally
