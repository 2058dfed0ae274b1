// profile/thread_stacks.h: a blocked thread's stack names where it waits, and the sampler
// writes only for work that outlives its delay.
#include "profile/thread_stacks.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/temp_dir.h"

namespace tally {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A thread named `name` waiting on a condition variable until Release.
class WaitingThread {
 public:
  explicit WaitingThread(const char* name) {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      waiting_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    });
    pthread_setname_np(thread_.native_handle(), name);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return waiting_; });
  }
  ~WaitingThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool waiting_ = false, released_ = false;
  std::thread thread_;
};

TEST(ThreadStacks, ABlockedThreadsStackNamesTheWaitItIsIn) {
  ScopedTempDir dir("thread_stacks_test");
  const std::string path = dir.path() + "/stacks.txt";
  WaitingThread waiting("stacks-waiter");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const int written = DumpThreadStacks(fd);
  close(fd);
  EXPECT_GE(written, 1);
  const std::string text = ReadFile(path);
  const size_t at = text.find("(stacks-waiter)\n");
  ASSERT_NE(at, std::string::npos) << text;
  const size_t next = text.find("--- thread", at);
  const std::string section = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
  EXPECT_NE(section.find("pthread_cond_wait"), std::string::npos) << section;
  // The caller does not dump itself: its frames would only show the dump.
  EXPECT_EQ(text.find("DumpThreadStacks"), std::string::npos);
}

TEST(ThreadStacks, TheSamplerWritesOnlyForWorkThatOutlivesItsDelay) {
  ScopedTempDir dir("thread_stacks_test");
  const std::string path = dir.path() + "/sampled.txt";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  {
    StackSampler quick(5.0, fd);
    EXPECT_FALSE(quick.dumped());
  }
  EXPECT_EQ(ReadFile(path), "") << "work done before the delay left a dump";
  bool dumped = false;
  {
    StackSampler slow(0.05, fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    dumped = slow.dumped();
  }
  close(fd);
  EXPECT_TRUE(dumped);
  // The sampled work (this thread, asleep) is among the stacks.
  const std::string text = ReadFile(path);
  EXPECT_NE(text.find("--- thread"), std::string::npos) << text;
  EXPECT_NE(text.find("nanosleep"), std::string::npos) << text;
}

}  // namespace
}  // namespace tally
