#include <cstdio>
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
  if (json) {
    for (const BenchRow& r : rows) {
      std::printf("{\"bench\": \"%s\", \"case\": \"%s\", \"value\": %.4g, \"unit\": \"%s\"",
                  JsonEscape(r.bench).c_str(), JsonEscape(r.name).c_str(), r.value, JsonEscape(r.unit).c_str());
      if (r.peer > 0) {
        std::printf(", \"peer\": %.4g, \"peer_name\": \"%s\", \"ratio\": %.3f", r.peer,
                    JsonEscape(r.peer_name).c_str(), r.value / r.peer);
      } else {
        std::printf(", \"peer\": null, \"ratio\": null");
      }
      if (!r.note.empty()) std::printf(", \"note\": \"%s\"", JsonEscape(r.note).c_str());
      std::printf("}\n");
    }
    std::fflush(stdout);
    return;
  }
  std::printf("%-28s %12s %-7s %12s %7s  %s\n", "case", "tally", "unit", "peer", "ratio", "peer / note");
  for (const BenchRow& r : rows) {
    if (r.peer > 0) {
      std::printf("%-28s %12.3f %-7s %12.3f %6.2fx  %s%s%s\n", r.name.c_str(), r.value, r.unit.c_str(), r.peer,
                  r.value / r.peer, r.peer_name.c_str(), r.note.empty() ? "" : "; ", r.note.c_str());
    } else {
      std::printf("%-28s %12.3f %-7s %12s %7s  %s\n", r.name.c_str(), r.value, r.unit.c_str(), "-", "-",
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

int BenchCommand(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "compute") == 0) {
    std::string name = "tally bench compute";
    argv[1] = name.data();
    return BenchCompute(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "usage: tally bench compute [--json] [--threads=2] [--steps=3] [--cases=resnet50,resnet20]\n");
  return 2;
}

}  // namespace tally
