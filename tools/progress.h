// A live progress line on stderr for interactive runs: epoch, batch, speed and ETA, redrawn
// in place at most 5 times a second. Log lines (stdout) stay intact: Clear() erases the bar
// before each is printed. Disabled (every call a no-op) unless stderr is a terminal, so
// logs redirected to files and parsers never see it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace tally {

class ProgressBar {
 public:
  explicit ProgressBar(bool wanted) : enabled_(wanted && isatty(STDERR_FILENO) == 1) {}
  ~ProgressBar() { Clear(); }

  // done of total batches of `epoch`; eta_seconds: until the run's end.
  void Update(int64_t epoch, int64_t done, int64_t total, double samples_per_sec, double eta_seconds) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * std::min(done, total) / total) : 0;
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[kWidth] = '\0';
    const long eta = static_cast<long>(std::max(0.0, eta_seconds));
    std::fprintf(stderr, "\r\033[KEpoch[%lld] [%s] %lld/%lld  %.1f samples/s  ETA %ld:%02ld:%02ld",
                 static_cast<long long>(epoch), bar, static_cast<long long>(done), static_cast<long long>(total),
                 samples_per_sec, eta / 3600, eta / 60 % 60, eta % 60);
    std::fflush(stderr);
    drawn_ = true;
  }

  void Clear() {
    if (!enabled_ || !drawn_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }

 private:
  const bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace tally
