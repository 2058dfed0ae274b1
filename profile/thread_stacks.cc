#include "profile/thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tally {
namespace {

constexpr int kSignal = SIGURG;
std::atomic<int> g_fd{-1};
std::atomic<bool> g_written{false};

// Async-signal-safe: write(2) and backtrace_symbols_fd (backtrace is loaded beforehand, so
// that its first call's dlopen of libgcc does not happen in a handler).
void WriteStack(int) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, g_fd.load());
  g_written.store(true);
}

std::string ThreadName(const std::string& tid) {
  std::string name;
  if (FILE* f = std::fopen(("/proc/self/task/" + tid + "/comm").c_str(), "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) name = buf;
    std::fclose(f);
  }
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

std::vector<std::string> ThreadIds() {
  std::vector<std::string> ids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return ids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ids.push_back(e->d_name);
  }
  closedir(d);
  return ids;
}

}  // namespace

int DumpThreadStacks(int fd) {
  static std::mutex one_at_a_time;  // the handler's globals serve one dump
  std::lock_guard<std::mutex> lock(one_at_a_time);
  void* warm[1];
  backtrace(warm, 1);
  g_fd.store(fd);
  struct sigaction action = {}, old = {};
  action.sa_handler = WriteStack;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(kSignal, &action, &old);
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  int written = 0;
  for (const std::string& tid : ThreadIds()) {
    const pid_t t = static_cast<pid_t>(std::atoi(tid.c_str()));
    if (t == self) continue;
    const std::string head = "--- thread " + tid + " (" + ThreadName(tid) + ")\n";
    if (write(fd, head.data(), head.size()) < 0) break;
    g_written.store(false);
    if (syscall(SYS_tgkill, getpid(), t, kSignal) != 0) continue;  // gone meanwhile
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (!g_written.load() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (g_written.load()) {
      ++written;
    } else {
      static const char kBlocked[] = "(no answer in 100 ms: it blocks the signal)\n";
      if (write(fd, kBlocked, sizeof kBlocked - 1) < 0) break;
    }
  }
  // A handler still on its way would find the old disposition: SIGURG's default ignores it.
  sigaction(kSignal, &old, nullptr);
  return written;
}

StackSampler::StackSampler(double after_seconds, int fd) {
  thread_ = std::thread([this, after_seconds, fd] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(after_seconds), [this] { return done_; })) return;
    dumped_ = true;
    lock.unlock();
    DumpThreadStacks(fd);
  });
}

StackSampler::~StackSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool StackSampler::dumped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dumped_;
}

}  // namespace tally
