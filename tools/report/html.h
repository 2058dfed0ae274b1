// The two outputs of `tally report` (docs/report.md), from a run directory read by
// profile::ReadRunDir:
//
//   std::vector<profile::NodeRun> nodes;
//   TALLY_RETURN_IF_ERROR(profile::ReadRunDir(dir, &nodes));
//   std::string html = ReportPage(dir, nodes, profile::CheckRun(nodes, config), config);
//   TALLY_RETURN_IF_ERROR(MergeTraces(dir, nodes, dir + "/trace.json", &stats));
//
// The page is one self-contained HTML file: inline CSS and JavaScript, the (downsampled)
// data embedded as JSON, drawn into SVG by the browser; it loads nothing from the network.
// Text from the run's files reaches the page only through that JSON and the DOM's
// textContent, never as markup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "profile/rules.h"

namespace tally {

// REQUIRES: nodes in ReadRunDir's order (scheduler, servers, workers).
std::string ReportPage(const std::string& run_dir, const std::vector<profile::NodeRun>& nodes,
                       const std::vector<profile::Finding>& findings, const profile::RuleConfig& rules);

// The page's static part: everything but the data. "@DATA@" marks where the data's JSON
// goes (inside a <script type="application/json"> element).
extern const char kReportPageTemplate[];

struct MergeStats {
  int nodes = 0;        // trace files merged
  int64_t events = 0;   // events written, metadata included
  int64_t t0_us = 0;    // scheduler clock of the earliest event: ts 0 of the merged trace
};

// Writes out_path: every node's NODE.trace.json in run_dir, its events moved onto the
// scheduler's clock (ts + the node's clock_offset_us, from NODE.meta.json, else from the
// trace's otherData), then shifted so the earliest event is at ts 0. pid becomes the node's
// index in `nodes`; each node gets process_name and process_sort_index events. Fails naming
// a malformed trace file, or when run_dir holds no trace file at all.
Status MergeTraces(const std::string& run_dir, const std::vector<profile::NodeRun>& nodes,
                   const std::string& out_path, MergeStats* stats);

}  // namespace tally
