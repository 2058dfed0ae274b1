#include "profile/monitor.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "profile/trace.h"

namespace tally {
namespace profile {
namespace {

// Jiffies of one "cpu" line of /proc/stat. total is user + nice + system + idle + iowait +
// irq + softirq + steal; guest and guest_nice are left out because the kernel already
// counts them in user and nice.
struct CpuTimes {
  uint64_t total = 0, idle = 0, iowait = 0;
};

// Everything read from /proc at one moment; two of them make the rates.
struct Reading {
  int64_t t_us = 0;
  CpuTimes all;
  std::vector<CpuTimes> cores;
  uint64_t net_rx = 0, net_tx = 0;        // bytes
  uint64_t disk_read = 0, disk_write = 0;  // bytes
  uint64_t process_ticks = 0;              // utime + stime, clock ticks
};

Status ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return Status::IoError("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  *text = s.str();
  return Status::Ok();
}

Status Malformed(const std::string& path, const std::string& why) {
  return Status::IoError("cannot parse " + path + ": " + why);
}

std::vector<std::string> Split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool ToU64(const std::string& s, uint64_t* v) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  *v = std::strtoull(s.c_str(), &end, 10);
  return *end == '\0';
}

Status ParseStat(const std::string& path, const std::string& text, Reading* r) {
  std::istringstream in(text);
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, 3, "cpu") != 0) continue;
    std::vector<std::string> f = Split(line);
    if (f.size() < 6) return Malformed(path, "short line \"" + line + "\"");
    CpuTimes t;
    for (size_t i = 1; i < f.size() && i <= 8; ++i) {
      uint64_t v = 0;
      if (!ToU64(f[i], &v)) return Malformed(path, "bad number in \"" + line + "\"");
      t.total += v;
      if (i == 4) t.idle = v;
      if (i == 5) t.iowait = v;
    }
    if (f[0] == "cpu") {
      r->all = t;
      found = true;
    } else {
      r->cores.push_back(t);
    }
  }
  if (!found) return Malformed(path, "no \"cpu\" line");
  return Status::Ok();
}

Status ParseMeminfo(const std::string& path, const std::string& text, MonitorSample* out) {
  std::istringstream in(text);
  uint64_t total = 0, available = 0;
  bool have_total = false, have_available = false;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = Split(line);
    if (f.size() < 2) continue;
    if (f[0] == "MemTotal:") have_total = ToU64(f[1], &total);
    if (f[0] == "MemAvailable:") have_available = ToU64(f[1], &available);
  }
  if (!have_total || !have_available) return Malformed(path, "no MemTotal or MemAvailable");
  out->mem_total = static_cast<int64_t>(total) * 1024;  // the file counts kB
  out->mem_used = static_cast<int64_t>(total - std::min(available, total)) * 1024;
  return Status::Ok();
}

// "  eth0: rx_bytes rx_packets ... (8 receive fields) tx_bytes ...", after two header lines.
Status ParseNetDev(const std::string& path, const std::string& text, Reading* r) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::vector<std::string> name = Split(line.substr(0, colon));
    if (name.size() != 1 || name[0] == "lo") continue;
    std::vector<std::string> f = Split(line.substr(colon + 1));
    uint64_t rx = 0, tx = 0;
    if (f.size() < 9 || !ToU64(f[0], &rx) || !ToU64(f[8], &tx)) {
      return Malformed(path, "bad line \"" + line + "\"");
    }
    r->net_rx += rx;
    r->net_tx += tx;
  }
  return Status::Ok();
}

// Whole disks only, so that no byte is counted twice: loop, ram, zram, dm- and md devices
// are left out (their IO is either not disk IO or also counted on the disks beneath them),
// and so is a partition, a name that is an earlier line's disk followed by digits or by
// "p" and digits (sda1 after sda, nvme0n1p2 after nvme0n1, mmcblk0p1 after mmcblk0).
bool IsWholeDisk(const std::string& name, const std::set<std::string>& disks) {
  for (const char* skip : {"loop", "ram", "zram", "dm-", "md"}) {
    if (name.compare(0, std::strlen(skip), skip) == 0) return false;
  }
  for (const std::string& disk : disks) {
    if (name.size() <= disk.size() || name.compare(0, disk.size(), disk) != 0) continue;
    size_t i = disk.size();
    if (name[i] == 'p') ++i;
    if (i < name.size() && name.find_first_not_of("0123456789", i) == std::string::npos) return false;
  }
  return true;
}

// "major minor name reads merged sectors_read ms writes merged sectors_written ...".
Status ParseDiskstats(const std::string& path, const std::string& text, Reading* r) {
  std::istringstream in(text);
  std::set<std::string> disks;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = Split(line);
    if (f.empty()) continue;
    uint64_t read = 0, written = 0;
    if (f.size() < 10 || !ToU64(f[5], &read) || !ToU64(f[9], &written)) {
      return Malformed(path, "bad line \"" + line + "\"");
    }
    if (!IsWholeDisk(f[2], disks)) continue;
    disks.insert(f[2]);
    r->disk_read += read * 512;  // sectors are 512 bytes here whatever the device's own size
    r->disk_write += written * 512;
  }
  return Status::Ok();
}

// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields are counted
// from the last ')'; utime and stime are fields 14 and 15.
Status ParseSelfStat(const std::string& path, const std::string& text, Reading* r) {
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return Malformed(path, "no \")\"");
  std::vector<std::string> f = Split(text.substr(paren + 1));
  uint64_t utime = 0, stime = 0;
  if (f.size() < 13 || !ToU64(f[11], &utime) || !ToU64(f[12], &stime)) return Malformed(path, "too few fields");
  r->process_ticks = utime + stime;
  return Status::Ok();
}

// A counter's growth; 0 when it went back (a counter reset, an interface that went away).
uint64_t Delta(uint64_t now, uint64_t before) { return now >= before ? now - before : 0; }

double BusyPercent(const CpuTimes& now, const CpuTimes& before) {
  const uint64_t total = Delta(now.total, before.total);
  if (total == 0) return 0;
  const uint64_t waiting = Delta(now.idle, before.idle) + Delta(now.iowait, before.iowait);
  return 100.0 * static_cast<double>(total - std::min(waiting, total)) / static_cast<double>(total);
}

// NVML, declared here rather than through nvml.h so that Tally needs neither the header
// nor the library to build: nvmlReturn_t is a C enum (0: NVML_SUCCESS) and nvmlDevice_t
// an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
constexpr unsigned int kNvmlNameSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// The loaded library, its devices, and the last good reading of each (kept when a query
// fails, so one failed query neither drops the GPU nor reads as idle).
class Nvml {
 public:
  explicit Nvml(bool enabled) { status_ = enabled ? Load() : "no NVML: turned off"; }
  ~Nvml() {
    if (initialized_) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  void Sample(std::vector<GpuSample>* out) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      NvmlUtilization util{};
      if (get_util_(devices_[i], &util) == 0) last_[i].util = util.gpu;
      NvmlMemory mem{};
      if (get_memory_(devices_[i], &mem) == 0) {
        last_[i].mem_used = static_cast<int64_t>(mem.used);
        last_[i].mem_total = static_cast<int64_t>(mem.total);
      }
    }
    *out = last_;
  }
  const std::string& status() const { return status_; }

 private:
  template <typename F>
  bool Symbol(const char* name, F* f) {
    *f = reinterpret_cast<F>(dlsym(lib_, name));
    return *f != nullptr;
  }
  std::string Error(const char* call, NvmlReturn rc) {
    const char* text = error_string_ != nullptr ? error_string_(rc) : nullptr;
    return std::string("no NVML: ") + call + " failed: " + (text != nullptr ? text : "error " + std::to_string(rc));
  }

  // Returns the status line.
  std::string Load() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return "no NVML: libnvidia-ml.so.1 not found";
    NvmlReturn (*init)() = nullptr;
    NvmlReturn (*get_count)(unsigned int*) = nullptr;
    NvmlReturn (*get_handle)(unsigned int, NvmlDevice*) = nullptr;
    NvmlReturn (*get_name)(NvmlDevice, char*, unsigned int) = nullptr;
    const char* missing = nullptr;
    auto need = [&](const char* name, auto* f) {
      if (!Symbol(name, f) && missing == nullptr) missing = name;
    };
    need("nvmlInit_v2", &init);
    need("nvmlShutdown", &shutdown_);
    need("nvmlDeviceGetCount_v2", &get_count);
    need("nvmlDeviceGetHandleByIndex_v2", &get_handle);
    need("nvmlDeviceGetName", &get_name);
    need("nvmlDeviceGetUtilizationRates", &get_util_);
    need("nvmlDeviceGetMemoryInfo", &get_memory_);
    Symbol("nvmlErrorString", &error_string_);  // only for messages
    if (missing != nullptr) return std::string("no NVML: libnvidia-ml.so.1 has no ") + missing;
    NvmlReturn rc = init();
    if (rc != 0) return Error("nvmlInit_v2", rc);
    initialized_ = true;
    unsigned int count = 0;
    rc = get_count(&count);
    if (rc != 0) return Error("nvmlDeviceGetCount_v2", rc);
    if (count == 0) return "NVML: no GPUs";
    std::vector<NvmlDevice> devices(count);
    std::string names;
    for (unsigned int i = 0; i < count; ++i) {
      rc = get_handle(i, &devices[i]);
      if (rc != 0) return Error("nvmlDeviceGetHandleByIndex_v2", rc);
      char name[kNvmlNameSize] = {};
      if (get_name(devices[i], name, kNvmlNameSize) == 0 && names.find(name) == std::string::npos) {
        names += (names.empty() ? "" : ", ") + std::string(name);
      }
    }
    devices_ = std::move(devices);
    last_.resize(count);
    return "NVML: " + std::to_string(count) + (count == 1 ? " GPU (" : " GPUs (") + names + ")";
  }

  std::string status_;
  void* lib_ = nullptr;
  bool initialized_ = false;
  NvmlReturn (*shutdown_)() = nullptr;
  const char* (*error_string_)(NvmlReturn) = nullptr;
  NvmlReturn (*get_util_)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*get_memory_)(NvmlDevice, NvmlMemory*) = nullptr;
  std::vector<NvmlDevice> devices_;
  std::vector<GpuSample> last_;
};

}  // namespace

class ProcSampler::Impl {
 public:
  explicit Impl(const MonitorOptions& options)
      : root_(options.proc_root), nvml_(options.nvml), ticks_per_s_(sysconf(_SC_CLK_TCK)) {}

  Status Sample(int64_t now_us, MonitorSample* out) {
    Reading now;
    now.t_us = now_us;
    *out = MonitorSample();
    out->t_us = now_us;
    std::string text;
    TALLY_RETURN_IF_ERROR(Read("stat", &text));
    TALLY_RETURN_IF_ERROR(ParseStat(Path("stat"), text, &now));
    TALLY_RETURN_IF_ERROR(Read("meminfo", &text));
    TALLY_RETURN_IF_ERROR(ParseMeminfo(Path("meminfo"), text, out));
    TALLY_RETURN_IF_ERROR(Read("net/dev", &text));
    TALLY_RETURN_IF_ERROR(ParseNetDev(Path("net/dev"), text, &now));
    TALLY_RETURN_IF_ERROR(Read("diskstats", &text));
    TALLY_RETURN_IF_ERROR(ParseDiskstats(Path("diskstats"), text, &now));
    TALLY_RETURN_IF_ERROR(Read("self/stat", &text));
    TALLY_RETURN_IF_ERROR(ParseSelfStat(Path("self/stat"), text, &now));
    nvml_.Sample(&out->gpus);
    out->cpu.assign(now.cores.size(), 0.0);
    if (have_last_ && now_us > last_.t_us) Rates(now, out);
    last_ = std::move(now);
    have_last_ = true;
    return Status::Ok();
  }

  std::string gpu_status() const { return nvml_.status(); }

 private:
  std::string Path(const char* name) const { return root_ + "/" + name; }
  Status Read(const char* name, std::string* text) const { return ReadFile(Path(name), text); }

  // The rates and percentages of the interval from last_ to now.
  void Rates(const Reading& now, MonitorSample* out) const {
    for (size_t i = 0; i < now.cores.size() && i < last_.cores.size(); ++i) {
      out->cpu[i] = BusyPercent(now.cores[i], last_.cores[i]);
    }
    out->cpu_total = BusyPercent(now.all, last_.all);
    const uint64_t total = Delta(now.all.total, last_.all.total);
    if (total > 0) out->iowait = 100.0 * Delta(now.all.iowait, last_.all.iowait) / total;
    const double seconds = (now.t_us - last_.t_us) / 1e6;
    out->net_rx_bps = Delta(now.net_rx, last_.net_rx) / seconds;
    out->net_tx_bps = Delta(now.net_tx, last_.net_tx) / seconds;
    out->disk_read_bps = Delta(now.disk_read, last_.disk_read) / seconds;
    out->disk_write_bps = Delta(now.disk_write, last_.disk_write) / seconds;
    if (ticks_per_s_ > 0) {
      out->process_cpu = 100.0 * Delta(now.process_ticks, last_.process_ticks) / ticks_per_s_ / seconds;
    }
  }

  const std::string root_;
  Nvml nvml_;
  const long ticks_per_s_;
  bool have_last_ = false;
  Reading last_;
};

ProcSampler::ProcSampler(const MonitorOptions& options) : impl_(std::make_unique<Impl>(options)) {}
ProcSampler::~ProcSampler() = default;
Status ProcSampler::Sample(int64_t now_us, MonitorSample* out) { return impl_->Sample(now_us, out); }
std::string ProcSampler::gpu_status() const { return impl_->gpu_status(); }

class SystemMonitor::Impl {
 public:
  Impl(const MonitorOptions& options, std::function<void(const MonitorSample&)> on_sample)
      : sampler_(options), on_sample_(std::move(on_sample)), interval_(options.interval_ms) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // The first reading only primes the rates: it is taken here, so that a missing /proc
  // fails Start, and not delivered.
  Status Begin() {
    MonitorSample first;
    TALLY_RETURN_IF_ERROR(sampler_.Sample(NowUs(), &first));
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  std::string gpu_status() const { return sampler_.gpu_status(); }

 private:
  void Loop() {
    if (Tracer::Get().enabled()) Tracer::Get().NameThread("monitor");
    using Clock = std::chrono::steady_clock;
    Clock::time_point next = Clock::now() + interval_;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_until(lock, next, [this] { return stop_; })) {
      lock.unlock();
      MonitorSample s;
      Status status = sampler_.Sample(NowUs(), &s);
      if (status.ok()) {
        on_sample_(s);
      } else if (!warned_) {
        LOG(WARNING) << "system monitor: " << status << " (later failures are not logged)";
        warned_ = true;
      }
      // Keep to the interval's grid; after a stall (a suspended process), start afresh.
      next += interval_;
      if (next < Clock::now()) next = Clock::now() + interval_;
      lock.lock();
    }
    lock.unlock();
    SampleLast(next - interval_);
  }

  // The interval cut short by the stop is delivered too, so that a node that lives less
  // than one interval still leaves a sample, and the rates of its last moments are seen.
  // Under 10 ms the clock-tick counters (100 Hz) would make the percentages noise.
  void SampleLast(std::chrono::steady_clock::time_point last) {
    if (std::chrono::steady_clock::now() - last < std::chrono::milliseconds(10)) return;
    MonitorSample s;
    if (sampler_.Sample(NowUs(), &s).ok()) on_sample_(s);
  }

  ProcSampler sampler_;  // used by the sampling thread only, after Begin
  std::function<void(const MonitorSample&)> on_sample_;
  const std::chrono::milliseconds interval_;
  bool warned_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

Status SystemMonitor::Start(const MonitorOptions& options, std::function<void(const MonitorSample&)> on_sample,
                            std::unique_ptr<SystemMonitor>* out) {
  if (options.interval_ms < 50 || options.interval_ms > 60000) {
    return Status::InvalidArgument("--monitor-interval-ms " + std::to_string(options.interval_ms) +
                                   ": give 50..60000");
  }
  auto impl = std::make_unique<Impl>(options, std::move(on_sample));
  TALLY_RETURN_IF_ERROR(impl->Begin());
  out->reset(new SystemMonitor(std::move(impl)));
  return Status::Ok();
}

SystemMonitor::SystemMonitor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SystemMonitor::~SystemMonitor() = default;
std::string SystemMonitor::gpu_status() const { return impl_->gpu_status(); }

}  // namespace profile
}  // namespace tally
