// The per-process trace written with --profile: Chrome's trace event format (JSON object
// form), which chrome://tracing and Perfetto open. Events are "X" (complete: ts, dur),
// "C" (counters: the system monitor), "i" (instant) and "M" (process and thread names);
// ts and dur are microseconds on the trace clock (NowUs). docs/profile.md has the layout.
//
//   Tracer::Get().Enable(path, "worker-0");       // once, early; off by default
//   { TraceScope s("fwd", "step"); ... }           // an X event for the scope
//   Tracer::Get().Complete("push", "comm", t0, dur, {{"key", 3}});
//   Tracer::Get().Finish(extra_metadata);          // writes the file
//
// Recording is a check of one atomic flag when disabled; when enabled, an event is
// appended to its thread's own buffer (no lock on the hot path).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "profile/records.h"

namespace tally {
namespace profile {

struct TraceEvent {
  char ph = 'X';
  const char* name = "";  // static strings only: events keep the pointer
  const char* cat = "";
  int64_t ts = 0;
  int64_t dur = 0;
  int tid = 0;
  // Up to two numeric arguments ("key", "bytes", ...); name nullptr when unused.
  const char* arg_name[2] = {nullptr, nullptr};
  double arg[2] = {0, 0};
};

class Tracer {
 public:
  static Tracer& Get();

  // Starts recording; the file is written by Finish. process_name names the process in
  // the trace ("worker 0").
  void Enable(const std::string& path, const std::string& process_name);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Stops and resumes recording between Enable and Finish (measuring the tracer's cost).
  void SetPaused(bool paused);
  // Names the calling thread in the trace ("trainer", "sender", "receive", "monitor").
  void NameThread(const std::string& name);

  void Complete(const char* name, const char* cat, int64_t ts, int64_t dur,
                const char* arg0 = nullptr, double v0 = 0, const char* arg1 = nullptr, double v1 = 0);
  void Instant(const char* name, const char* cat, int64_t ts);
  // A counter event: one series per (name, series) pair.
  void Counter(const char* name, int64_t ts, const std::vector<std::pair<std::string, double>>& series);

  // Writes every thread's events to the file, with `other` as the trace's "otherData"
  // (node, clock offset, ...). Stops recording.
  Status Finish(const std::map<std::string, std::string>& other);

 private:
  Tracer() = default;
  struct Buffer;
  Buffer* ThreadBuffer();
  std::atomic<bool> enabled_{false};  // recording now
  std::atomic<bool> armed_{false};    // between Enable and Finish
};

// An X event from construction to destruction, on the calling thread; nothing when the
// tracer is off.
class TraceScope {
 public:
  TraceScope(const char* name, const char* cat)
      : name_(name), cat_(cat), start_(Tracer::Get().enabled() ? NowUs() : -1) {}
  ~TraceScope() {
    if (start_ >= 0) Tracer::Get().Complete(name_, cat_, start_, NowUs() - start_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const char* name_;
  const char* cat_;
  int64_t start_;
};

}  // namespace profile
}  // namespace tally
