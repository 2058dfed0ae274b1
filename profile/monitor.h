// The system monitor: samples the machine every interval (500 ms by default) on its own
// thread: CPU use per core, iowait, memory, network and disk bytes, this process's CPU, and,
// when NVML can be loaded at run time (libnvidia-ml.so.1), each GPU's utilisation and memory.
// Without NVML or GPUs the GPU list is empty and gpu_status() says why.
//
//   std::unique_ptr<SystemMonitor> mon;
//   TALLY_RETURN_IF_ERROR(SystemMonitor::Start(options, [&](const MonitorSample& s) {...}, &mon));
//   ...
//   mon.reset();  // stops the thread
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "profile/records.h"

namespace tally {
namespace profile {

struct MonitorOptions {
  int interval_ms = 500;
  std::string proc_root = "/proc";  // tests point it at a directory of fake files
  bool nvml = true;                 // try to load NVML
};

// Reads /proc (stat, meminfo, net/dev, diskstats, self/stat) and turns two readings into
// rates. The first Sample after construction fills what needs no earlier reading (memory,
// GPUs) and leaves the rates 0 (cpu holds one 0 per core). docs/monitor.md gives the files
// and the formulas. Not thread-safe: one thread calls Sample; gpu_status() is constant
// after construction and may be read from any thread.
class ProcSampler {
 public:
  explicit ProcSampler(const MonitorOptions& options);
  ~ProcSampler();
  // Fails naming the file that could not be read or parsed.
  Status Sample(int64_t now_us, MonitorSample* out);
  // "NVML: 2 GPUs (NVIDIA H100 80GB HBM3)", "no NVML: libnvidia-ml.so.1 not found", ...
  std::string gpu_status() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Start takes the first reading itself (so a missing /proc fails it) and only to prime the
// rates; on_sample then runs on the monitor's thread once per interval, first one interval
// after Start, and once more at the stop for the interval it cut short (unless under 10 ms).
// A reading that fails later is skipped and logged once.
class SystemMonitor {
 public:
  // Fails naming --monitor-interval-ms unless options.interval_ms is in 50..60000.
  static Status Start(const MonitorOptions& options, std::function<void(const MonitorSample&)> on_sample,
                      std::unique_ptr<SystemMonitor>* out);
  ~SystemMonitor();  // stops and joins the sampling thread
  std::string gpu_status() const;

 private:
  class Impl;
  explicit SystemMonitor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace profile
}  // namespace tally
