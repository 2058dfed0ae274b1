// Plan: a performance model of one synchronous parameter-server training job — N symmetric
// workers, S servers, one link of B Gb/s per node — that predicts its step time, throughput
// and scaling efficiency by replaying the step's compute and every push and answer of every
// key slice through the links and the servers' CPUs (docs/plan.md writes the rules down).
//
//   PlanInputs in;            // ResNet-50, batch 256, fp16 wire, overlap on: the defaults
//   in.workers = 64;
//   in.gbps = 25;
//   in.img_per_s = 2800;      // one worker's compute alone
//   std::vector<PlanResult> sweep;
//   int best = 0;
//   TALLY_RETURN_IF_ERROR(SweepServers(in, &sweep, &best));   // S = 1..64
//   printf("%d servers: %.1f%%\n", sweep[best].inputs.servers, 100 * sweep[best].efficiency);
//
// Everything here is a pure function of its inputs: no threads, no clocks, no I/O. Errors
// for bad inputs name the `tally plan` flag that carries the value.
#pragma once

#include <string>
#include <vector>

#include "models/layer_costs.h"
#include "base/status.h"

namespace tally {

constexpr int kWarmupSteps = 2;

struct PlanInputs {
  int workers = 1;          // --workers: N
  int servers = 1;          // --servers: S (Predict needs >= 1)
  double gbps = 0;          // --gbps: each node's link, each way, in Gb/s
  double img_per_s = 0;     // --img-per-s: R, one worker's training speed with no communication
  // --wire: fp16 or fp32, what pushes and answers carry; 2bit: pushes 2-bit compressed
  // (--gradient-compression 2bit), answers fp16.
  std::string wire = "fp16";
  int batch = 256;          // --batch: images per worker per step
  bool overlap = true;      // --overlap: the next forward waits per group, not for every answer
  double latency_us = 50;   // --latency-us: one way, per message
  // --mtu: packets of this many IP bytes; each carries mtu - 52 bytes of data (IPv4 and TCP
  // headers with timestamps) in mtu + 38 bytes on the wire (Ethernet's header, FCS,
  // preamble and gap), so a link moves data at B * (mtu - 52) / (mtu + 38).
  int mtu = 1500;
  // --frame-bytes: the wire bytes per packet besides the IP packet (38 on Ethernet; 14 where
  // a shaper such as `tc tbf` counts only the Ethernet header).
  int frame_bytes = 38;
  double server_gbs = 2.0;  // --server-gbs: a server's sum + SGD update speed, GB/s of pushes in
  // The network's groups in forward order; empty: ResNet-50 (LayerGroups of ModelConfig{}).
  std::vector<LayerGroup> groups;
  // Steps replayed. The first kWarmupSteps start from idle links and no answers; the step
  // reported is the mean of the others (when communication is the bound, consecutive steps
  // differ by a few tenths of a percent as the order of requests shifts).
  int steps = 8;
};

// Per-step occupancy of the busiest instance of each kind of resource, in seconds.
struct PlanBusy {
  double worker_link = 0;  // one worker's uplink (= its downlink): P / B
  double server_link = 0;  // the most loaded server's downlink (= its uplink): N * P_s / B
  double server_cpu = 0;   // the most loaded server's sums and updates: N * P_s / server_gbs
};

struct PlanResult {
  PlanInputs inputs;         // as given, groups filled in
  double step_s = 0;         // a step in steady state, forward start to the next forward start
  double compute_s = 0;      // batch / img_per_s
  double exposed_s = 0;      // step_s - compute_s
  double img_per_s = 0;      // the whole job: workers * batch / step_s
  double efficiency = 0;     // img_per_s / (workers * inputs.img_per_s)
  double bytes_per_worker = 0;         // pushed per step
  double bytes_per_worker_pulled = 0;  // pulled per step: as much, but for 2bit (fp16 answers)
  int requests_per_worker = 0;  // slices pushed per step
  PlanBusy busy;
  std::string busiest;       // "worker link", "server link" or "server CPU"
};

// Replays inputs.steps steps of the job and reports the last.
Status Predict(const PlanInputs& inputs, PlanResult* out);

// The recommendation rule: the smallest server count whose efficiency is within
// kRecommendSlack of the best in the sweep. Returns an index into sweep (not empty).
constexpr double kRecommendSlack = 0.005;
int RecommendIndex(const std::vector<PlanResult>& sweep);

// Predicts for every S in 1..inputs.workers (inputs.servers is ignored) and recommends one.
Status SweepServers(const PlanInputs& inputs, std::vector<PlanResult>* sweep, int* recommended);

}  // namespace tally
