#include "profile/run_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tally {
namespace profile {
namespace {

namespace fs = std::filesystem;

const char kMetaSuffix[] = ".meta.json";

Status OpenAppend(const std::string& path, std::FILE** f) {
  *f = std::fopen(path.c_str(), "a");
  if (*f == nullptr) return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

Status WriteWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out) return Status::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IoError("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

// Reads every line of path (missing: none) through parse into out.
template <typename T>
Status ReadLines(const std::string& path, std::vector<T>* out) {
  std::ifstream in(path);
  if (!in) return Status::Ok();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    T value;
    Status s = FromJson(line, &value);
    if (!s.ok()) return Status::InvalidArgument(path + " line " + std::to_string(n) + ": " + s.message());
    out->push_back(std::move(value));
  }
  return Status::Ok();
}

int RoleOrder(const std::string& role) { return role == "scheduler" ? 0 : role == "server" ? 1 : 2; }

}  // namespace

std::string NodeName(const std::string& role, int rank) {
  return role == "scheduler" ? role : role + "-" + std::to_string(rank);
}

Status RunWriter::Open(const std::string& dir, const NodeMeta& meta, std::unique_ptr<RunWriter>* out) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("--run-dir " + dir + ": cannot create it: " + ec.message());
  std::unique_ptr<RunWriter> w(new RunWriter());
  w->dir_ = dir;
  w->node_ = meta.node;
  TALLY_RETURN_IF_ERROR(w->UpdateMeta(meta));
  TALLY_RETURN_IF_ERROR(OpenAppend(w->Path(".steps.jsonl"), &w->steps_));
  TALLY_RETURN_IF_ERROR(OpenAppend(w->Path(".monitor.jsonl"), &w->monitor_));
  TALLY_RETURN_IF_ERROR(OpenAppend(w->Path(".findings.jsonl"), &w->findings_));
  *out = std::move(w);
  return Status::Ok();
}

RunWriter::~RunWriter() {
  for (std::FILE* f : {steps_, monitor_, findings_}) {
    if (f != nullptr) std::fclose(f);
  }
}

std::string RunWriter::Path(const std::string& suffix) const { return (fs::path(dir_) / (node_ + suffix)).string(); }

void RunWriter::Append(std::FILE* f, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fputs(line.c_str(), f);
  std::fputc('\n', f);
  std::fflush(f);
}

void RunWriter::AddStep(const StepRecord& r) { Append(steps_, ToJson(r)); }
void RunWriter::AddSample(const MonitorSample& s) { Append(monitor_, ToJson(s)); }
void RunWriter::AddFinding(const Finding& f) { Append(findings_, ToJson(f)); }

Status RunWriter::UpdateMeta(const NodeMeta& meta) {
  std::lock_guard<std::mutex> lock(mu_);
  return WriteWhole(Path(kMetaSuffix), ToJson(meta));
}

Status ReadRunDir(const std::string& dir, std::vector<NodeRun>* nodes) {
  nodes->clear();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound("run directory " + dir + " does not exist");
  const std::string suffix = kMetaSuffix;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string node = name.substr(0, name.size() - suffix.size());
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    NodeRun run;
    Status s = FromJson(text, &run.meta);
    if (!s.ok()) return Status::InvalidArgument(e.path().string() + ": " + s.message());
    const std::string base = (fs::path(dir) / node).string();
    TALLY_RETURN_IF_ERROR(ReadLines(base + ".steps.jsonl", &run.steps));
    TALLY_RETURN_IF_ERROR(ReadLines(base + ".monitor.jsonl", &run.samples));
    TALLY_RETURN_IF_ERROR(ReadLines(base + ".findings.jsonl", &run.findings));
    nodes->push_back(std::move(run));
  }
  if (ec) return Status::IoError("cannot list " + dir + ": " + ec.message());
  if (nodes->empty()) {
    return Status::NotFound("run directory " + dir + " holds no NODE.meta.json: was the run started with --run-dir " +
                            dir + "?");
  }
  std::sort(nodes->begin(), nodes->end(), [](const NodeRun& a, const NodeRun& b) {
    return std::make_pair(RoleOrder(a.meta.role), a.meta.rank) < std::make_pair(RoleOrder(b.meta.role), b.meta.rank);
  });
  return Status::Ok();
}

}  // namespace profile
}  // namespace tally
