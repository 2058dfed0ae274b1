#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>

#include <gflags/gflags.h>

#include "tools/command.h"

namespace tally {

// True when gflags knows `name` (underscored), or it is "no" + a boolean flag's name.
static bool KnownFlag(const std::string& name) {
  gflags::CommandLineFlagInfo info;
  if (gflags::GetCommandLineFlagInfo(name.c_str(), &info)) return true;
  return name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info) &&
         info.type == "bool";
}

// True for a boolean flag's value written as MXNet's scripts write it: 0, 1, true, false.
static bool BoolWord(const char* v) {
  return v != nullptr && (!std::strcmp(v, "0") || !std::strcmp(v, "1") || !std::strcmp(v, "true") ||
                          !std::strcmp(v, "false"));
}

void ParseFlags(const std::string& usage, int* argc, char*** argv) {
  // gflags takes a boolean's value only after '=': "--cuda-graph 0" is joined into
  // "--cuda_graph=0" (the joined texts live as long as the process, as argv does).
  static std::deque<std::string> joined;
  for (int i = 1; i < *argc; ++i) {
    char* a = (*argv)[i];
    if (a[0] != '-' || a[1] != '-' || a[2] == '\0') continue;
    std::string typed(a, std::strcspn(a, "="));
    for (char* p = a + 2; *p && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
    const std::string name(a + 2, std::strcspn(a + 2, "="));
    if (!KnownFlag(name)) {
      std::fprintf(stderr, "%s: unknown flag %s (see %s --help)\n", (*argv)[0], typed.c_str(), (*argv)[0]);
      std::exit(2);
    }
    gflags::CommandLineFlagInfo info;
    if (std::strchr(a, '=') == nullptr && i + 1 < *argc && BoolWord((*argv)[i + 1]) &&
        gflags::GetCommandLineFlagInfo(name.c_str(), &info) && info.type == "bool") {
      joined.push_back(std::string(a) + "=" + (*argv)[i + 1]);
      (*argv)[i] = joined.back().data();
      for (int j = i + 1; j + 1 < *argc; ++j) (*argv)[j] = (*argv)[j + 1];
      (*argv)[--*argc] = nullptr;
    }
  }
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(argc, argv, /*remove_flags=*/true);
  if (*argc > 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (flags are --name=value)\n", (*argv)[0],
                 (*argv)[1]);
    std::exit(2);
  }
}

Status ParseImageShape(const std::string& text, Shape* chw) {
  std::stringstream ss(text);
  std::string part;
  Shape s;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v <= 0 || v > 65536) {
      return Status::InvalidArgument("--image-shape '" + text + "': '" + part +
                                     "' is not a positive integer (expected C,H,W such as 3,224,224)");
    }
    s.push_back(v);
  }
  if (s.size() != 3) {
    return Status::InvalidArgument("--image-shape '" + text + "' must have 3 values C,H,W (such as 3,224,224)");
  }
  *chw = s;
  return Status::Ok();
}

Status ParseGpus(const std::string& text, std::vector<int>* gpus) {
  gpus->clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos) comma = text.size();
    Device d;
    Status s = ParseDevice("cuda:" + text.substr(begin, comma - begin), &d);
    if (!s.ok()) return Status::InvalidArgument("--gpus " + text + ": " + s.message());
    gpus->push_back(d.index);
    begin = comma + 1;
  }
  return Status::Ok();
}

}  // namespace tally
