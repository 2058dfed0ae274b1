#include "profile/trace.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>

namespace tally {
namespace profile {
namespace {

// A process records at most this many events (about 80 bytes each); later ones are
// counted as dropped, and the count goes into the trace's otherData.
constexpr int64_t kMaxEvents = 4000000;

std::string Escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

// JSON has no NaN or Infinity: they are written as null.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

struct Tracer::Buffer {
  std::mutex mu;  // uncontended but for Finish
  int tid = 0;
  std::string name;
  std::vector<TraceEvent> events;
};

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<void>> keep;  // every thread's Buffer, alive past its thread
  std::vector<void*> buffers;
  std::string path, process_name;
  std::atomic<int64_t> recorded{0}, dropped{0};
  struct CounterEvent {
    std::string name;
    int64_t ts;
    std::vector<std::pair<std::string, double>> series;
  };
  std::vector<CounterEvent> counters;  // GUARDED_BY(mu)
};

Registry& Reg() {
  static Registry* r = new Registry();
  return *r;
}

thread_local void* t_buffer = nullptr;

}  // namespace

Tracer& Tracer::Get() {
  static Tracer* t = new Tracer();
  return *t;
}

Tracer::Buffer* Tracer::ThreadBuffer() {
  if (t_buffer == nullptr) {
    auto b = std::make_shared<Buffer>();
    Registry& r = Reg();
    std::lock_guard<std::mutex> lock(r.mu);
    b->tid = static_cast<int>(r.buffers.size()) + 1;
    b->events.reserve(4096);
    r.buffers.push_back(b.get());
    r.keep.push_back(b);
    t_buffer = b.get();
  }
  return static_cast<Buffer*>(t_buffer);
}

void Tracer::Enable(const std::string& path, const std::string& process_name) {
  Registry& r = Reg();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.path = path;
    r.process_name = process_name;
  }
  armed_.store(true);
  enabled_.store(true);
}

void Tracer::SetPaused(bool paused) {
  if (armed_.load()) enabled_.store(!paused);
}

void Tracer::NameThread(const std::string& name) {
  Buffer* b = ThreadBuffer();
  std::lock_guard<std::mutex> lock(Reg().mu);
  b->name = name;
}

void Tracer::Complete(const char* name, const char* cat, int64_t ts, int64_t dur, const char* arg0, double v0,
                      const char* arg1, double v1) {
  if (!enabled()) return;
  Registry& r = Reg();
  if (r.recorded.fetch_add(1, std::memory_order_relaxed) >= kMaxEvents) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Buffer* b = ThreadBuffer();
  TraceEvent e;
  e.ph = 'X';
  e.name = name;
  e.cat = cat;
  e.ts = ts;
  e.dur = dur;
  e.tid = b->tid;
  e.arg_name[0] = arg0;
  e.arg[0] = v0;
  e.arg_name[1] = arg1;
  e.arg[1] = v1;
  std::lock_guard<std::mutex> lock(b->mu);
  b->events.push_back(e);
}

void Tracer::Instant(const char* name, const char* cat, int64_t ts) {
  if (!enabled()) return;
  Buffer* b = ThreadBuffer();
  TraceEvent e;
  e.ph = 'i';
  e.name = name;
  e.cat = cat;
  e.ts = ts;
  e.tid = b->tid;
  std::lock_guard<std::mutex> lock(b->mu);
  b->events.push_back(e);
}

void Tracer::Counter(const char* name, int64_t ts, const std::vector<std::pair<std::string, double>>& series) {
  if (!enabled()) return;
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  r.counters.push_back({name, ts, series});
}

Status Tracer::Finish(const std::map<std::string, std::string>& other) {
  if (!armed_.exchange(false)) return Status::Ok();
  enabled_.store(false);
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string tmp = r.path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return Status::IoError("cannot write the trace " + tmp);
  const int pid = static_cast<int>(getpid());
  std::fprintf(f, "{\"traceEvents\":[\n");
  std::fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"ts\":0,\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"%s\"}}",
               pid, Escaped(r.process_name).c_str());
  for (void* p : r.buffers) {
    Buffer* b = static_cast<Buffer*>(p);
    std::lock_guard<std::mutex> buffer_lock(b->mu);
    if (!b->name.empty()) {
      std::fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"ts\":0,\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                   pid, b->tid, Escaped(b->name).c_str());
    }
    for (const TraceEvent& e : b->events) {
      std::fprintf(f, ",\n{\"ph\":\"%c\",\"name\":\"%s\",\"cat\":\"%s\",\"ts\":%lld,\"pid\":%d,\"tid\":%d", e.ph, e.name,
                   e.cat, static_cast<long long>(e.ts), pid, e.tid);
      if (e.ph == 'X') std::fprintf(f, ",\"dur\":%lld", static_cast<long long>(e.dur));
      if (e.ph == 'i') std::fprintf(f, ",\"s\":\"t\"");
      if (e.arg_name[0] != nullptr) {
        std::fprintf(f, ",\"args\":{\"%s\":%s", e.arg_name[0], JsonNumber(e.arg[0]).c_str());
        if (e.arg_name[1] != nullptr) std::fprintf(f, ",\"%s\":%s", e.arg_name[1], JsonNumber(e.arg[1]).c_str());
        std::fputc('}', f);
      }
      std::fputc('}', f);
    }
  }
  for (const Registry::CounterEvent& c : r.counters) {
    std::fprintf(f, ",\n{\"ph\":\"C\",\"name\":\"%s\",\"ts\":%lld,\"pid\":%d,\"tid\":0,\"args\":{",
                 Escaped(c.name).c_str(), static_cast<long long>(c.ts), pid);
    for (size_t i = 0; i < c.series.size(); ++i) {
      std::fprintf(f, "%s\"%s\":%s", i ? "," : "", Escaped(c.series[i].first).c_str(),
                   JsonNumber(c.series[i].second).c_str());
    }
    std::fprintf(f, "}}");
  }
  std::fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"dropped_events\":\"%lld\"",
               static_cast<long long>(r.dropped.load()));
  for (const auto& [k, v] : other) std::fprintf(f, ",\"%s\":\"%s\"", Escaped(k).c_str(), Escaped(v).c_str());
  std::fprintf(f, "}}\n");
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), r.path.c_str()) != 0) return Status::IoError("cannot write the trace " + r.path);
  return Status::Ok();
}

}  // namespace profile
}  // namespace tally
