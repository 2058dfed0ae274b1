// A run directory: every node's profiler files (records.h lists them; docs/profile.md
// gives their lines). RunWriter writes one node's; ReadRunDir reads every node's back.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "profile/records.h"
#include "profile/rules.h"

namespace tally {
namespace profile {

// "worker-0", "server-1", "scheduler".
std::string NodeName(const std::string& role, int rank);

class RunWriter {
 public:
  // Creates dir (and its parents) and writes NODE.meta.json; the .jsonl files are opened
  // for appending, so a resumed run adds to them. Fails naming the path it cannot write.
  static Status Open(const std::string& dir, const NodeMeta& meta, std::unique_ptr<RunWriter>* out);
  ~RunWriter();

  // Thread-safe; each line is flushed at once, so a crash loses nothing written before it.
  void AddStep(const StepRecord& r);
  void AddSample(const MonitorSample& s);
  void AddFinding(const Finding& f);
  // Rewrites NODE.meta.json (the clock offset is known better at the end of a run).
  Status UpdateMeta(const NodeMeta& meta);

  // dir/NODE + suffix, e.g. Path(".trace.json").
  std::string Path(const std::string& suffix) const;
  const std::string& dir() const { return dir_; }

 private:
  RunWriter() = default;
  void Append(std::FILE* f, const std::string& line);
  std::string dir_, node_;
  std::mutex mu_;
  std::FILE* steps_ = nullptr;
  std::FILE* monitor_ = nullptr;
  std::FILE* findings_ = nullptr;
};

// Reads every NODE.meta.json of dir and the node's other files, ordered scheduler,
// servers, workers by rank. A missing .jsonl file is empty; a malformed line fails naming
// the file and its line number. Fails when dir holds no NODE.meta.json.
Status ReadRunDir(const std::string& dir, std::vector<NodeRun>* nodes);

}  // namespace profile
}  // namespace tally
