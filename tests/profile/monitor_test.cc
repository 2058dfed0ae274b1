// The system monitor: /proc parsing and rates against a fake proc root with figures worked
// out by hand, the real /proc, NVML's absence, and the sampling thread.
#include "profile/monitor.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace tally {
namespace profile {
namespace {

namespace fs = std::filesystem;

// A proc root in a temporary directory; each Write replaces one file.
class FakeProc {
 public:
  FakeProc() {
    fs::create_directories(root_ + "/net");
    fs::create_directories(root_ + "/self");
  }
  const std::string& root() const { return root_; }
  void Write(const std::string& name, const std::string& text) const { std::ofstream(root_ + "/" + name) << text; }

  // The first reading: 2 cores.
  void First() const {
    // user nice system idle iowait irq softirq steal guest guest_nice
    Write("stat",
          "cpu  100 0 100 700 100 0 0 0 50 0\n"
          "cpu0 50 0 50 350 50 0 0 0 25 0\n"
          "cpu1 50 0 50 350 50 0 0 0 25 0\n"
          "intr 12345 0 0\nctxt 999\nbtime 1700000000\n");
    Write("meminfo", "MemTotal:           1000 kB\nMemFree:             100 kB\nMemAvailable:        400 kB\n");
    Write("net/dev",
          "Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets\n"
          "    lo:    5000      10    0    0    0     0          0         0     5000      10 0 0 0 0 0 0\n"
          "  eth0:    1000      10    0    0    0     0          0         0     2000      20 0 0 0 0 0 0\n"
          "  eth1:     500       5    0    0    0     0          0         0        0       0 0 0 0 0 0 0\n");
    // major minor name reads merged sectors_read ms writes merged sectors_written ...
    Write("diskstats",
          "   7       0 loop0 100 0 800 0 0 0 0 0 0 0 0\n"
          "   8       0 sda 10 0 100 5 4 0 40 3 0 8 8\n"
          "   8       1 sda1 10 0 100 5 4 0 40 3 0 8 8\n"
          "   8      16 sdb 1 0 0 0 0 0 0 0 0 0 0\n"
          " 259       0 nvme0n1 20 0 200 5 4 0 80 3 0 8 8 0 0 0 0 0 0\n"
          " 259       1 nvme0n1p1 20 0 200 5 4 0 80 3 0 8 8 0 0 0 0 0 0\n"
          " 253       0 dm-0 30 0 300 5 4 0 90 3 0 8 8\n");
    // comm with spaces and parentheses; utime 100, stime 50
    Write("self/stat", "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 100 50 0 0 20 0 1 0 100\n");
  }

  // Two seconds later.
  void Second() const {
    Write("stat",
          "cpu  400 0 200 1100 300 0 0 0 550 0\n"
          "cpu0 300 0 100 400 200 0 0 0 300 0\n"
          "cpu1 100 0 100 700 100 0 0 0 250 0\n"
          "intr 22345 0 0\n");
    Write("meminfo", "MemTotal:           1000 kB\nMemFree:              50 kB\nMemAvailable:        250 kB\n");
    Write("net/dev",
          "Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets\n"
          "    lo:  900000      10    0    0    0     0          0         0   900000      10 0 0 0 0 0 0\n"
          "  eth0:    5000      10    0    0    0     0          0         0     3000      20 0 0 0 0 0 0\n"
          "  eth1:    2500       5    0    0    0     0          0         0     1000       0 0 0 0 0 0 0\n");
    Write("diskstats",
          "   7       0 loop0 100 0 99800 0 0 0 0 0 0 0 0\n"
          "   8       0 sda 10 0 300 5 4 0 140 3 0 8 8\n"
          "   8       1 sda1 10 0 300 5 4 0 140 3 0 8 8\n"
          "   8      16 sdb 1 0 0 0 0 0 0 0 0 0 0\n"
          " 259       0 nvme0n1 20 0 400 5 4 0 80 3 0 8 8 0 0 0 0 0 0\n"
          " 259       1 nvme0n1p1 20 0 400 5 4 0 80 3 0 8 8 0 0 0 0 0 0\n"
          " 253       0 dm-0 30 0 99300 5 4 0 99090 3 0 8 8\n");
    Write("self/stat", "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 100 0 0 20 0 1 0 100\n");
  }

 private:
  ScopedTempDir dir_{"monitor_test"};
  const std::string root_ = dir_.path();
};

MonitorOptions FakeOptions(const FakeProc& proc) {
  MonitorOptions o;
  o.proc_root = proc.root();
  o.nvml = false;
  return o;
}

TEST(ProcSamplerTest, FirstSampleHasMemoryAndNoRates) {
  FakeProc proc;
  proc.First();
  ProcSampler sampler(FakeOptions(proc));
  MonitorSample s;
  ASSERT_TRUE(sampler.Sample(1000000, &s).ok());
  EXPECT_EQ(s.t_us, 1000000);
  EXPECT_EQ(s.cpu, std::vector<double>({0, 0}));
  EXPECT_EQ(s.cpu_total, 0);
  EXPECT_EQ(s.iowait, 0);
  EXPECT_EQ(s.mem_total, 1000 * 1024);
  EXPECT_EQ(s.mem_used, 600 * 1024);
  EXPECT_EQ(s.net_rx_bps, 0);
  EXPECT_EQ(s.disk_read_bps, 0);
  EXPECT_EQ(s.process_cpu, 0);
  EXPECT_TRUE(s.gpus.empty());
}

TEST(ProcSamplerTest, RatesFromTwoReadingsMatchTheFiguresByHand) {
  FakeProc proc;
  proc.First();
  ProcSampler sampler(FakeOptions(proc));
  MonitorSample s;
  ASSERT_TRUE(sampler.Sample(1000000, &s).ok());
  proc.Second();
  ASSERT_TRUE(sampler.Sample(3000000, &s).ok());
  // All cores: total +1000 jiffies (guest left out: it is inside user), idle +400,
  // iowait +200: busy 40%, iowait 20%.
  EXPECT_DOUBLE_EQ(s.cpu_total, 40);
  EXPECT_DOUBLE_EQ(s.iowait, 20);
  // cpu0: total +500, idle +50, iowait +150: 60%. cpu1: total +500, idle +350, iowait +50: 20%.
  ASSERT_EQ(s.cpu.size(), 2u);
  EXPECT_DOUBLE_EQ(s.cpu[0], 60);
  EXPECT_DOUBLE_EQ(s.cpu[1], 20);
  EXPECT_EQ(s.mem_used, 750 * 1024);
  // eth0 +4000 and eth1 +2000 received, +1000 each sent, over 2 s; lo does not count.
  EXPECT_DOUBLE_EQ(s.net_rx_bps, 3000);
  EXPECT_DOUBLE_EQ(s.net_tx_bps, 1000);
  // sda +200 and nvme0n1 +200 sectors read, sda +100 written, over 2 s; partitions,
  // loop and dm devices do not count.
  EXPECT_DOUBLE_EQ(s.disk_read_bps, 400 * 512 / 2.0);
  EXPECT_DOUBLE_EQ(s.disk_write_bps, 100 * 512 / 2.0);
  // utime + stime grew by 200 ticks in 2 s.
  EXPECT_DOUBLE_EQ(s.process_cpu, 100.0 * 200 / sysconf(_SC_CLK_TCK) / 2);
}

TEST(ProcSamplerTest, MissingFileFailsNamingIt) {
  FakeProc proc;
  proc.First();
  fs::remove(proc.root() + "/diskstats");
  ProcSampler sampler(FakeOptions(proc));
  MonitorSample s;
  Status status = sampler.Sample(1000000, &s);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(proc.root() + "/diskstats"), std::string::npos) << status;
}

TEST(ProcSamplerTest, MalformedFileFailsNamingIt) {
  FakeProc proc;
  proc.First();
  proc.Write("meminfo", "MemFree: 12 kB\n");
  ProcSampler sampler(FakeOptions(proc));
  MonitorSample s;
  Status status = sampler.Sample(1000000, &s);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(proc.root() + "/meminfo"), std::string::npos) << status;
}

int CpuLines() {
  std::ifstream in("/proc/stat");
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.size() > 3 && line.compare(0, 3, "cpu") == 0 && isdigit(line[3])) ++n;
  }
  return n;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

TEST(ProcSamplerTest, RealProcGivesSaneValues) {
  ProcSampler sampler(MonitorOptions{});
  MonitorSample s;
  const int64_t t0 = NowUs();
  const double cpu0 = ProcessCpuSeconds();
  ASSERT_TRUE(sampler.Sample(t0, &s).ok());
  // Spin until this process has used 200 ms of CPU, however busy the machine is.
  volatile double sink = 0;
  while (ProcessCpuSeconds() - cpu0 < 0.2 && NowUs() - t0 < 5000000) sink = sink + 1;
  const double cpu1 = ProcessCpuSeconds();
  const int64_t t1 = NowUs();
  ASSERT_TRUE(sampler.Sample(t1, &s).ok());
  EXPECT_EQ(static_cast<int>(s.cpu.size()), CpuLines());
  EXPECT_GE(static_cast<int>(s.cpu.size()), 1);
  for (double c : s.cpu) {
    EXPECT_GE(c, 0);
    EXPECT_LE(c, 100);
  }
  EXPECT_GT(s.cpu_total, 0);
  EXPECT_LE(s.cpu_total, 100);
  EXPECT_GE(s.iowait, 0);
  EXPECT_LE(s.iowait, 100);
  EXPECT_GT(s.mem_total, 0);
  EXPECT_GT(s.mem_used, 0);
  EXPECT_LE(s.mem_used, s.mem_total);
  // /proc/self/stat counts whole clock ticks (10 ms): allow a few of them over the interval.
  const double seconds = (t1 - t0) / 1e6;
  EXPECT_NEAR(s.process_cpu, 100 * (cpu1 - cpu0) / seconds, 100 * 0.04 / seconds);
  EXPECT_GE(s.net_rx_bps, 0);
  EXPECT_GE(s.disk_read_bps, 0);
}

// This machine has no NVIDIA driver: no GPUs, and the status says why. (On a GPU host the
// status names the GPUs instead, and the list holds one entry per GPU.)
TEST(ProcSamplerTest, WithoutNvmlGpusAreEmpty) {
  ProcSampler sampler(MonitorOptions{});
  MonitorSample s;
  ASSERT_TRUE(sampler.Sample(NowUs(), &s).ok());
  const std::string status = sampler.gpu_status();
  EXPECT_NE(status.find("NVML"), std::string::npos) << status;
  if (status.compare(0, 5, "NVML:") == 0) {
    GTEST_SKIP() << "this host has NVML: " << status << ", " << s.gpus.size() << " GPUs sampled";
  }
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_EQ(status.compare(0, 8, "no NVML:"), 0) << status;
}

TEST(ProcSamplerTest, NvmlTurnedOffSaysSo) {
  MonitorOptions o;
  o.nvml = false;
  ProcSampler sampler(o);
  EXPECT_EQ(sampler.gpu_status(), "no NVML: turned off");
}

TEST(SystemMonitorTest, DeliversSamplesAtItsInterval) {
  std::mutex mu;
  std::vector<int64_t> times;
  MonitorOptions o;
  o.interval_ms = 100;
  std::unique_ptr<SystemMonitor> mon;
  const int64_t start = NowUs();
  ASSERT_TRUE(SystemMonitor::Start(o, [&](const MonitorSample& s) {
    std::lock_guard<std::mutex> lock(mu);
    times.push_back(s.t_us);
  }, &mon).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(550));
  mon.reset();
  std::lock_guard<std::mutex> lock(mu);
  // About 5 and the stop's; a loaded machine may wake the thread late, never early.
  ASSERT_GE(times.size(), 3u);
  ASSERT_LE(times.size(), 7u);
  EXPECT_GE(times[0] - start, 90000);  // the first comes one interval after Start
  for (size_t i = 1; i + 1 < times.size(); ++i) {
    EXPECT_GE(times[i] - times[i - 1], 50000);
    EXPECT_LE(times[i] - times[i - 1], 300000);
  }
  EXPECT_GE(times.back() - times[times.size() - 2], 10000);  // the stop's, the interval cut short
}

TEST(SystemMonitorTest, TheStopDeliversTheIntervalItCutShort) {
  std::vector<MonitorSample> samples;  // the callback runs on the monitor's thread, joined below
  MonitorOptions o;
  o.interval_ms = 60000;
  std::unique_ptr<SystemMonitor> mon;
  const int64_t start = NowUs();
  ASSERT_TRUE(SystemMonitor::Start(o, [&](const MonitorSample& s) { samples.push_back(s); }, &mon).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  mon.reset();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_GE(samples[0].t_us - start, 90000);
  EXPECT_FALSE(samples[0].cpu.empty());
  EXPECT_GT(samples[0].mem_total, 0);
}

TEST(SystemMonitorTest, StopsPromptlyWithALongInterval) {
  MonitorOptions o;
  o.interval_ms = 60000;
  std::unique_ptr<SystemMonitor> mon;
  ASSERT_TRUE(SystemMonitor::Start(o, [](const MonitorSample&) {}, &mon).ok());
  EXPECT_NE(mon->gpu_status().find("NVML"), std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  mon.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

TEST(SystemMonitorTest, RefusesAnIntervalOutOfRange) {
  for (int ms : {0, 49, 60001}) {
    MonitorOptions o;
    o.interval_ms = ms;
    std::unique_ptr<SystemMonitor> mon;
    Status s = SystemMonitor::Start(o, [](const MonitorSample&) {}, &mon);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << ms;
    EXPECT_NE(s.message().find("--monitor-interval-ms"), std::string::npos) << s;
    EXPECT_EQ(mon, nullptr);
  }
}

TEST(SystemMonitorTest, FailsWhenProcCannotBeRead) {
  MonitorOptions o;
  o.proc_root = "/nonexistent-proc-root";
  std::unique_ptr<SystemMonitor> mon;
  Status s = SystemMonitor::Start(o, [](const MonitorSample&) {}, &mon);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-proc-root/stat"), std::string::npos) << s;
}

}  // namespace
}  // namespace profile
}  // namespace tally
