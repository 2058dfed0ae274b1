// tally report: a run directory written by `tally train --run-dir DIR` as one HTML page
// with the findings of every rule, or (--merge) every process's Chrome trace as one trace
// on the scheduler's clock. docs/report.md shows both.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gflags/gflags.h>

#include "profile/run_dir.h"
#include "tools/command.h"
#include "tools/data_tools.h"
#include "tools/report/html.h"

DEFINE_bool(merge, false, "report: merge the run's NODE.trace.json files into one trace (RUN_DIR/trace.json) instead");
DECLARE_string(out);
DECLARE_string(run_dir);
DECLARE_string(profile_rules);

namespace tally {
namespace {

const char kCmd[] = "tally report";

// ReadRunDir's failure, with what to do about it.
Status ReadRun(const std::string& dir, std::vector<profile::NodeRun>* nodes) {
  Status s = profile::ReadRunDir(dir, nodes);
  if (s.code() == Status::Code::kNotFound && s.message().find("--run-dir") == std::string::npos) {
    return Status::NotFound(s.message() + ": write one with `tally train ... --run-dir " + dir + "`");
  }
  return s;
}

Status WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) return Status::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IoError("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

Status Merge(const std::string& dir, const std::string& out) {
  std::vector<profile::NodeRun> nodes;
  TALLY_RETURN_IF_ERROR(ReadRun(dir, &nodes));
  MergeStats stats;
  TALLY_RETURN_IF_ERROR(MergeTraces(dir, nodes, out, &stats));
  std::printf("%s: merged %d node(s)' traces, %lld events, onto the scheduler's clock (ts 0 = its %lld us)\n", kCmd,
              stats.nodes, static_cast<long long>(stats.events), static_cast<long long>(stats.t0_us));
  std::printf("%s: wrote %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", kCmd, out.c_str());
  return Status::Ok();
}

Status Report(const std::string& dir, const std::string& out, const profile::RuleConfig& rules) {
  std::vector<profile::NodeRun> nodes;
  TALLY_RETURN_IF_ERROR(ReadRun(dir, &nodes));
  const std::vector<profile::Finding> findings = profile::CheckRun(nodes, rules);
  for (const profile::Finding& f : findings) std::printf("%s\n", f.Line().c_str());
  TALLY_RETURN_IF_ERROR(WriteFile(out, ReportPage(dir, nodes, findings, rules)));
  std::printf("%s: %zu node(s), %zu finding(s); wrote %s\n", kCmd, nodes.size(), findings.size(), out.c_str());
  return Status::Ok();
}

}  // namespace

int ReportCommand(int argc, char** argv) {
  std::vector<std::string> args;
  TakePositionalArgs(&argc, argv, &args);
  ParseFlags(
      "tally report RUN_DIR [--out FILE] [--profile-rules SPEC]\n"
      "  writes RUN_DIR/report.html (or FILE): one self-contained page with the job's summary, each\n"
      "  worker's step time split, loss and accuracy, server load, system use and the findings of\n"
      "  every rule over the whole run (also printed, one per line).\n"
      "tally report --merge RUN_DIR [--out FILE]\n"
      "  writes RUN_DIR/trace.json (or FILE): every process's trace (train --profile) on the\n"
      "  scheduler's clock, for Perfetto or chrome://tracing. See docs/report.md.",
      &argc, &argv, {__FILE__});
  if (args.size() > 1) UsageError(kCmd, "unexpected argument '" + args[1] + "' (one RUN_DIR)");
  const std::string dir = args.empty() ? FLAGS_run_dir : args[0];
  if (dir.empty()) UsageError(kCmd, "expected RUN_DIR, the --run-dir of a `tally train` run (see --help)");
  const std::string out =
      !FLAGS_out.empty() ? FLAGS_out : (std::filesystem::path(dir) / (FLAGS_merge ? "trace.json" : "report.html")).string();
  Status s;
  if (FLAGS_merge) {
    s = Merge(dir, out);
  } else {
    profile::RuleConfig rules;
    Status parsed = profile::ParseRuleConfig(FLAGS_profile_rules, &rules);
    if (!parsed.ok()) UsageError(kCmd, "--profile-rules: " + parsed.message());
    s = Report(dir, out, rules);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kCmd, s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tally
