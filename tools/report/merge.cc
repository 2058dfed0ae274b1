// `tally report --merge`: every node's Chrome trace on the scheduler's clock, in one file.
// Trace files can hold millions of events, so each is parsed twice with a callback that
// sees one event at a time and drops it (the first pass finds the earliest time, the
// second writes), never holding a whole file's events in memory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "profile/run_dir.h"
#include "tools/report/html.h"

namespace tally {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char kTraceSuffix[] = ".trace.json";

// One node's trace file and how to move its events onto the merged time line.
struct Source {
  std::string node;
  std::string path;
  const profile::NodeMeta* meta = nullptr;  // null: a trace without NODE.meta.json
  int pid = 0;                              // in the merged trace
  int64_t offset_us = 0;                    // scheduler clock = trace clock + this
  int64_t os_pid = 0;                       // the process's own pid, seen in its events
  int64_t events = 0;
};

// What one pass over a trace file found. Events are the traceEvents array's objects (or the
// top-level array's, in the array form of the format).
struct Scan {
  int64_t min_ts = std::numeric_limits<int64_t>::max();  // over events with a ts, M excluded
  bool have_offset = false;                              // otherData's clock_offset_us
  int64_t offset_us = 0;
  int64_t os_pid = -1;
  int64_t events = 0;
  std::string error;  // the first malformed event
};

int64_t LineOf(const std::string& path, size_t byte) {
  std::ifstream in(path, std::ios::binary);
  int64_t line = 1;
  char c;
  for (size_t i = 0; i + 1 < byte && in.get(c); ++i) line += c == '\n';
  return line;
}

// Parses path, calling on_event(event, index) for each event; fills the scan's otherData
// fields. on_event returns false (with scan->error set) to stop at a malformed event.
template <typename OnEvent>
Status ParseTrace(const std::string& path, Scan* scan, OnEvent on_event) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError("cannot read " + path);
  std::string key;  // the top-level key being parsed (object form)
  bool array_form = false;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 0 && event == json::parse_event_t::array_start) array_form = true;
    if (depth == 1 && event == json::parse_event_t::key) key = parsed.get<std::string>();
    const int event_depth = array_form ? 1 : 2;
    if (depth == event_depth && event == json::parse_event_t::object_end && (array_form || key == "traceEvents")) {
      if (scan->error.empty() && !on_event(parsed, scan->events)) return false;
      ++scan->events;
      return false;  // handled: drop it
    }
    if (!array_form && depth == 1 && event == json::parse_event_t::object_end && key == "otherData") {
      auto it = parsed.find("clock_offset_us");
      if (it != parsed.end()) {
        // Tracer::Finish writes otherData's values as strings.
        if (it->is_number_integer()) {
          scan->offset_us = it->get<int64_t>();
          scan->have_offset = true;
        } else if (it->is_string()) {
          char* end = nullptr;
          const std::string s = it->get<std::string>();
          const long long v = std::strtoll(s.c_str(), &end, 10);
          scan->have_offset = !s.empty() && *end == '\0';
          if (scan->have_offset) scan->offset_us = v;
        }
      }
    }
    return true;
  };
  try {
    json rest = json::parse(in, callback);
    if (!rest.is_object() && !rest.is_array()) {
      return Status::InvalidArgument(path + ": not a Chrome trace (expected {\"traceEvents\": [...]} or [...])");
    }
  } catch (const json::parse_error& e) {
    return Status::InvalidArgument(path + " line " + std::to_string(LineOf(path, e.byte)) +
                                   ": not valid JSON: " + e.what());
  } catch (const json::exception& e) {  // a field of the wrong type
    return Status::InvalidArgument(path + ": " + e.what());
  }
  if (!scan->error.empty()) return Status::InvalidArgument(path + ": " + scan->error);
  return Status::Ok();
}

// Checks the fields every event needs; ts may be absent only on M events.
bool CheckEvent(const json& e, int64_t index, Scan* scan) {
  auto ph = e.find("ph");
  auto ts = e.find("ts");
  std::string why;
  if (ph == e.end() || !ph->is_string() || ph->get<std::string>().empty()) {
    why = "no \"ph\"";
  } else if (ts != e.end() && !ts->is_number()) {
    why = "\"ts\" is not a number";
  } else if (ts == e.end() && ph->get<std::string>() != "M") {
    why = "no \"ts\"";
  }
  if (why.empty()) return true;
  scan->error = "event " + std::to_string(index) + " (counting from 0): " + why + ": " +
                e.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 120);
  return false;
}

std::string ProcessLabel(const Source& s) {
  if (s.meta == nullptr) return s.node + " (pid " + std::to_string(s.os_pid) + ")";
  const profile::NodeMeta& m = *s.meta;
  std::string label = m.role == "scheduler" ? m.role : m.role + " " + std::to_string(m.rank);
  return label + " (" + (m.host.empty() ? "?" : m.host) + ", pid " + std::to_string(m.pid) + ")";
}

json Metadata(const char* name, int pid, json args) {
  return {{"ph", "M"}, {"name", name}, {"ts", 0}, {"pid", pid}, {"tid", 0}, {"args", std::move(args)}};
}

void WriteEvent(std::FILE* f, const json& e, bool* first) {
  std::fputs(*first ? "\n" : ",\n", f);
  *first = false;
  std::fputs(e.dump(-1, ' ', false, json::error_handler_t::replace).c_str(), f);
}

// The trace files of dir: those of `nodes` first, in their order, then any without a
// NODE.meta.json, by name.
std::vector<Source> FindSources(const std::string& dir, const std::vector<profile::NodeRun>& nodes) {
  std::vector<Source> sources;
  std::set<std::string> known;
  for (size_t i = 0; i < nodes.size(); ++i) {
    known.insert(nodes[i].meta.node);
    const std::string path = (fs::path(dir) / (nodes[i].meta.node + kTraceSuffix)).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    Source s;
    s.node = nodes[i].meta.node;
    s.path = path;
    s.meta = &nodes[i].meta;
    s.pid = static_cast<int>(i);
    sources.push_back(s);
  }
  std::vector<std::string> extra;
  std::error_code ec;
  const std::string suffix = kTraceSuffix;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string node = name.substr(0, name.size() - suffix.size());
    if (!known.count(node)) extra.push_back(node);
  }
  std::sort(extra.begin(), extra.end());
  for (size_t i = 0; i < extra.size(); ++i) {
    Source s;
    s.node = extra[i];
    s.path = (fs::path(dir) / (extra[i] + kTraceSuffix)).string();
    s.pid = static_cast<int>(nodes.size() + i);
    sources.push_back(s);
  }
  return sources;
}

}  // namespace

Status MergeTraces(const std::string& run_dir, const std::vector<profile::NodeRun>& nodes,
                   const std::string& out_path, MergeStats* stats) {
  *stats = MergeStats();
  std::vector<Source> sources = FindSources(run_dir, nodes);
  if (sources.empty()) {
    return Status::NotFound("run directory " + run_dir + " holds no NODE" + kTraceSuffix +
                            " file: run the job with --profile (and --run-dir " + run_dir + ")");
  }
  // Pass 1: each node's offset and earliest event.
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (Source& s : sources) {
    Scan scan;
    TALLY_RETURN_IF_ERROR(ParseTrace(s.path, &scan, [&scan](const json& e, int64_t index) {
      if (!CheckEvent(e, index, &scan)) return false;
      auto pid = e.find("pid");
      if (scan.os_pid < 0 && pid != e.end() && pid->is_number_integer()) scan.os_pid = pid->get<int64_t>();
      auto ts = e.find("ts");
      if (ts != e.end() && e.at("ph") != "M") {
        scan.min_ts = std::min(scan.min_ts, static_cast<int64_t>(std::floor(ts->get<double>())));
      }
      return true;
    }));
    // A node's meta is written last, with the offset measured at the end of the run; a
    // meta whose offset was never measured (clock_rtt_us -1) yields to the trace's own.
    const bool meta_measured = s.meta != nullptr && s.meta->clock_rtt_us >= 0;
    s.offset_us = meta_measured || !scan.have_offset ? (s.meta ? s.meta->clock_offset_us : 0) : scan.offset_us;
    s.os_pid = scan.os_pid;
    if (scan.min_ts != std::numeric_limits<int64_t>::max()) t0 = std::min(t0, scan.min_ts + s.offset_us);
  }
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;

  // Pass 2: write.
  const std::string tmp = out_path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return Status::IoError("cannot write " + tmp);
  std::fputs("{\"traceEvents\":[", f);
  bool first = true;
  for (const Source& s : sources) {
    WriteEvent(f, Metadata("process_name", s.pid, {{"name", ProcessLabel(s)}}), &first);
    WriteEvent(f, Metadata("process_sort_index", s.pid, {{"sort_index", s.pid}}), &first);
    stats->events += 2;
  }
  for (const Source& s : sources) {
    Scan scan;
    Status st = ParseTrace(s.path, &scan, [&](const json& in, int64_t index) {
      if (!CheckEvent(in, index, &scan)) return false;
      const std::string ph = in["ph"].get<std::string>();
      auto name = in.find("name");
      if (ph == "M" && name != in.end() && name->is_string() && name->get<std::string>().rfind("process_", 0) == 0) {
        return true;  // replaced by ours
      }
      json e = in;
      e["pid"] = s.pid;
      if (!e.contains("tid") || !e["tid"].is_number()) e["tid"] = 0;
      auto ts = e.find("ts");
      if (ph == "M") {
        e["ts"] = 0;
      } else if (ts->is_number_integer()) {
        *ts = ts->get<int64_t>() + s.offset_us - t0;
      } else {
        *ts = ts->get<double>() + static_cast<double>(s.offset_us - t0);
      }
      WriteEvent(f, e, &first);
      ++stats->events;
      return true;
    });
    if (!st.ok()) {
      std::fclose(f);
      std::remove(tmp.c_str());
      return st;
    }
  }
  json other = {{"merged_by", "tally report --merge"},
                {"run_dir", run_dir},
                {"t0_scheduler_us", std::to_string(t0)},
                {"note", "ts = the node's trace clock + its clock_offset_us - t0_scheduler_us"}};
  for (const Source& s : sources) other["clock_offset_us." + s.node] = std::to_string(s.offset_us);
  std::fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":%s}\n",
               other.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  std::fclose(f);
  std::error_code ec;
  if (ok) fs::rename(tmp, out_path, ec);
  if (!ok || ec) {
    std::remove(tmp.c_str());
    return Status::IoError("cannot write " + out_path + (ec ? ": " + ec.message() : ""));
  }
  stats->nodes = static_cast<int>(sources.size());
  stats->t0_us = t0;
  return Status::Ok();
}

}  // namespace tally
