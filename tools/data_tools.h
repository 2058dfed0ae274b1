// Helpers shared by the data subcommands (`tally im2rec`, `tally rec`, `tally make-data`):
// positional arguments beside gflags, and a progress bar for long runs.
//
// Not thread-safe: a command calls these from its main thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tally {

// MXNet's tools take positional arguments (`im2rec prefix root --resize 256`), which
// ParseFlags refuses. Moves them out of argv into *positional, leaving argv[0] and the flags
// (with their values, `--resize 256` as well as `--resize=256`) for ParseFlags.
void TakePositionalArgs(int* argc, char** argv, std::vector<std::string>* positional);

// A one-line progress bar on stderr, drawn only when stderr is a terminal (logs and tests
// see nothing), redrawn at most 10 times a second.
//
//   ProgressBar bar("packing", items.size());
//   for (...) { ...; bar.Update(++done); }
//   bar.Finish();
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar() { Finish(); }
  void Update(uint64_t done);
  // Clears the bar so that a summary line can follow.
  void Finish();
  double seconds() const;

 private:
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// Exits the process with code 2 after printing "<command>: <message>" to stderr. For
// unknown or contradictory flags, which are the user's to fix before anything runs.
[[noreturn]] void UsageError(const std::string& command, const std::string& message);

}  // namespace tally
