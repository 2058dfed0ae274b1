#include "tools/data_tools.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <gflags/gflags.h>

namespace tally {

void TakePositionalArgs(int* argc, char** argv, std::vector<std::string>* positional) {
  int kept = 1;
  bool flags_done = false;
  for (int i = 1; i < *argc; ++i) {
    const char* a = argv[i];
    if (flags_done || a[0] != '-' || a[1] == '\0') {
      positional->push_back(a);
      continue;
    }
    if (std::strcmp(a, "--") == 0) {
      flags_done = true;
      continue;
    }
    argv[kept++] = argv[i];
    if (std::strchr(a, '=')) continue;
    // `--name value`: a flag that is not a bool takes the next argument as its value.
    std::string name(a + (a[1] == '-' ? 2 : 1));
    for (char& c : name) c = c == '-' ? '_' : c;
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(name.c_str(), &info) && info.type != "bool" && i + 1 < *argc) {
      argv[kept++] = argv[++i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
}

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double ProgressBar::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::Update(uint64_t done) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const int width = 30;
  const double frac = total_ ? static_cast<double>(done) / total_ : 1.0;
  const int filled = static_cast<int>(frac * width);
  const double secs = seconds();
  const double rate = secs > 0 ? done / secs : 0;
  const double eta = rate > 0 ? (total_ - done) / rate : 0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %llu/%llu %5.1f%% %.0f/s eta %.0fs   ", label_.c_str(), filled,
               "##############################", width - filled, "", static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_), 100.0 * frac, rate, eta);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void UsageError(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", command.c_str(), message.c_str());
  std::exit(2);
}

}  // namespace tally
