#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

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

// Whether `path` (a flag's source file, as the compiler named it) is one of `files`: the
// same path, or one ending in "/" + the file.
static bool FromFiles(const std::string& path, const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    if (path == f) return true;
    if (path.size() > f.size() && path.compare(path.size() - f.size(), f.size(), f) == 0 &&
        path[path.size() - f.size() - 1] == '/') {
      return true;
    }
  }
  return false;
}

// `tally CMD --help`: the usage and the command's own flags, as they are typed (dashes).
static void PrintHelp(const std::string& usage, const std::vector<std::string>& files) {
  std::printf("%s\n\nflags:\n", usage.c_str());
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  for (const gflags::CommandLineFlagInfo& f : all) {
    if (!FromFiles(f.filename, files)) continue;
    std::string name = f.name;
    for (char& c : name) c = c == '_' ? '-' : c;
    std::string value = f.default_value;
    if (f.type == "string") {
      value = "\"" + value + "\"";
    } else if (f.type == "double") {  // gflags keeps every digit: 0.10000000000000001
      char shortest[32];
      std::snprintf(shortest, sizeof shortest, "%g", std::strtod(value.c_str(), nullptr));
      value = shortest;
    }
    std::printf("  --%s=%s  %s\n", name.c_str(), value.c_str(), f.description.c_str());
  }
  std::printf("(--helpfull lists every flag, the logging library's included)\n");
}

void ParseFlags(const std::string& usage, int* argc, char*** argv, const std::vector<std::string>& flag_files) {
  for (int i = 1; i < *argc; ++i) {
    const std::string a = (*argv)[i];
    if (a == "--help" || a == "-help" || a == "-h" || a == "--helpshort") {
      PrintHelp(usage, flag_files);
      std::exit(0);
    }
  }
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
