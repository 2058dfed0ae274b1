// Where this process's threads are: every thread's call stack, written to a file descriptor,
// for the question a timing cannot answer ("the decode waited 2 s - inside what?").
//
//   DumpThreadStacks(STDERR_FILENO);            // now, every thread but the caller
//
//   {
//     StackSampler sampler(0.5, STDERR_FILENO);  // if still here after 0.5 s, dump once
//     ... work that may block ...
//   }                                           // done sooner: nothing is written
//
// Each thread is asked in turn with a signal (SIGPROF's neighbour, SIGURG, whose default is
// to be ignored, so a stray one harms nothing); its handler writes "--- thread TID (NAME)"
// and its frames as backtrace_symbols_fd does: exported names with offsets, else the library
// and offset. Threads that block signals are skipped after 100 ms. Meant for diagnostics and
// probes, not for the hot path: it installs its handler for the dump and puts the old back.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace tally {

// Returns the number of threads that wrote their stack.
int DumpThreadStacks(int fd);

class StackSampler {
 public:
  StackSampler(double after_seconds, int fd);
  ~StackSampler();
  StackSampler(const StackSampler&) = delete;
  StackSampler& operator=(const StackSampler&) = delete;
  bool dumped() const;  // whether the work outlived the delay

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;     // GUARDED_BY(mu_)
  bool dumped_ = false;   // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace tally
