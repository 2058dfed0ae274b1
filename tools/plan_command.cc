// tally plan: predicts a synchronous ResNet-50 job's step time, throughput and scaling
// efficiency from its shape (workers, servers, link speed, one worker's speed) with the
// model of plan/model.h, and recommends a server count. docs/plan.md has the rules.
#include <cstdio>
#include <string>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>

#include "plan/model.h"
#include "tools/command.h"

// --workers, --servers and --json are `tally bench`'s flags too: one executable, one flag each.
DECLARE_int32(workers);
DECLARE_int32(servers);
DECLARE_bool(json);
DEFINE_double(gbps, 0, "plan: each node's link to the switch, each way, in Gb/s");
// Shared with `tally bench replay` (the speed it emulates, the dtype it sends) and `tally
// train` (--overlap): one executable, one set of flags.
DECLARE_double(img_per_s);
DECLARE_string(wire);
DEFINE_int32(batch, 256, "plan: images per worker per step");
DECLARE_bool(overlap);
DEFINE_double(latency_us, 50, "plan: one-way latency of a message, microseconds");
DEFINE_int32(mtu, 1500, "plan: the links' MTU; each packet carries mtu - 52 bytes of data");
DEFINE_int32(frame_bytes, 38, "plan: wire bytes per packet besides the IP packet (Ethernet: 38; tc tbf counts 14)");
DEFINE_double(server_gbs, 2.0, "plan: a server's sum + SGD update speed, GB/s of pushed bytes taken in");
DEFINE_bool(table, false, "plan: the table of docs/plan.md: 8/16/64/256 workers at 25 and 100 Gb/s");

namespace tally {
namespace {

const char kCmd[] = "tally plan";
const char kUsage[] =
    "tally plan --workers N [--servers S] --gbps B --img-per-s R [--wire fp16|fp32|2bit] [--batch 256]\n"
    "           [--overlap 1|0] [--latency-us 50] [--server-gbs 2] [--mtu 1500] [--frame-bytes 38] [--json]\n"
    "tally plan --table [--json]\n"
    "\n"
    "Predicts the step time, the job's img/s and the scaling efficiency (img/s / (N * R)) of a\n"
    "synchronous ResNet-50 job of N workers and S servers, and recommends S (the fewest within\n"
    "0.5 points of the best). --workers: N. --servers: S; 0 or left out: every S in 1..N.\n"
    "--json: one JSON object. --table: the markdown table of docs/plan.md (R = 2800, fp16, batch 256,\n"
    "overlap on; --latency-us and --server-gbs apply).";

using Json = nlohmann::ordered_json;

Json ResultJson(const PlanResult& r) {
  return Json{{"servers", r.inputs.servers},
              {"step_ms", r.step_s * 1e3},
              {"img_per_s", r.img_per_s},
              {"efficiency", r.efficiency},
              {"compute_ms", r.compute_s * 1e3},
              {"exposed_ms", r.exposed_s * 1e3},
              {"bytes_per_worker", r.bytes_per_worker}, {"bytes_per_worker_pulled", r.bytes_per_worker_pulled},
              {"requests_per_worker", r.requests_per_worker},
              {"busy_ms",
               {{"worker_link", r.busy.worker_link * 1e3},
                {"server_link", r.busy.server_link * 1e3},
                {"server_cpu", r.busy.server_cpu * 1e3}}},
              {"busiest", r.busiest}};
}

Json InputsJson(const PlanInputs& in) {
  return Json{{"model", "resnet-50"}, {"workers", in.workers},     {"gbps", in.gbps},
              {"worker_img_per_s", in.img_per_s}, {"wire", in.wire}, {"batch", in.batch},
              {"overlap", in.overlap},  {"latency_us", in.latency_us}, {"server_gbs", in.server_gbs},
              {"mtu", in.mtu}, {"frame_bytes", in.frame_bytes}};
}

void PrintInputs(const PlanInputs& in) {
  std::printf("%s: ResNet-50, %d workers x %g img/s, batch %d, %s wire, %g Gb/s links (MTU %d), %g us latency, "
              "servers update at %g GB/s, overlap %s\n\n",
              kCmd, in.workers, in.img_per_s, in.batch, in.wire.c_str(), in.gbps, in.mtu, in.latency_us, in.server_gbs,
              in.overlap ? "on" : "off");
}

void PrintOne(const PlanResult& r) {
  const PlanInputs& in = r.inputs;
  const double step = r.step_s;
  std::printf("%d servers\n", in.servers);
  std::printf("  step time      %8.2f ms  (compute %.2f ms + exposed communication %.2f ms)\n", step * 1e3,
              r.compute_s * 1e3, r.exposed_s * 1e3);
  std::printf("  throughput     %8.0f img/s for the job\n", r.img_per_s);
  std::printf("  efficiency     %8.1f %%  of %d x %g img/s\n", 100 * r.efficiency, in.workers, in.img_per_s);
  if (r.bytes_per_worker_pulled == r.bytes_per_worker) {
    std::printf("  per worker     %8.1f MB pushed, and as much pulled, in %d requests per step\n",
                r.bytes_per_worker / 1e6, r.requests_per_worker);
  } else {
    std::printf("  per worker     %8.1f MB pushed, %.1f MB pulled, in %d requests per step\n",
                r.bytes_per_worker / 1e6, r.bytes_per_worker_pulled / 1e6, r.requests_per_worker);
  }
  std::printf("  busy per step  worker link %.1f ms (%.0f%%), server link %.1f ms (%.0f%%), server CPU %.1f ms "
              "(%.0f%%): busiest %s\n",
              r.busy.worker_link * 1e3, 100 * r.busy.worker_link / step, r.busy.server_link * 1e3,
              100 * r.busy.server_link / step, r.busy.server_cpu * 1e3, 100 * r.busy.server_cpu / step,
              r.busiest.c_str());
}

// Past 8 servers the rows of a sweep are the powers of two, the recommended and the last:
// enough to see the curve; --json lists every one.
void PrintSweep(const std::vector<PlanResult>& sweep, int recommended) {
  std::printf("%7s %9s %10s %10s %11s  %s\n", "servers", "step ms", "img/s", "efficiency", "exposed ms", "busiest");
  for (size_t i = 0; i < sweep.size(); ++i) {
    const PlanResult& r = sweep[i];
    const int s = r.inputs.servers;
    const bool shown = s <= 8 || (s & (s - 1)) == 0 || static_cast<int>(i) == recommended || i + 1 == sweep.size();
    if (!shown) continue;
    std::printf("%7d %9.2f %10.0f %9.1f%% %11.2f  %s%s\n", s, r.step_s * 1e3, r.img_per_s, 100 * r.efficiency,
                r.exposed_s * 1e3, r.busiest.c_str(), static_cast<int>(i) == recommended ? "   <- recommended" : "");
  }
  const PlanResult& best = sweep[recommended];
  std::printf("\nrecommended: %d servers, %.1f %% efficiency, %.0f img/s (the fewest within %.1f points of the best)\n",
              best.inputs.servers, 100 * best.efficiency, best.img_per_s, 100 * kRecommendSlack);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "%s: %s\n", kCmd, s.message().c_str());
  return 2;
}

PlanInputs InputsFromFlags() {
  PlanInputs in;
  in.workers = FLAGS_workers;
  in.servers = FLAGS_servers;
  in.gbps = FLAGS_gbps;
  in.img_per_s = FLAGS_img_per_s;
  in.wire = FLAGS_wire;
  in.batch = FLAGS_batch;
  in.overlap = FLAGS_overlap;
  in.latency_us = FLAGS_latency_us;
  in.mtu = FLAGS_mtu;
  in.frame_bytes = FLAGS_frame_bytes;
  in.server_gbs = FLAGS_server_gbs;
  return in;
}

int RunTable(PlanInputs in) {
  std::vector<LayerGroup> groups;
  Status s = LayerGroups(ModelConfig(), &groups);
  if (!s.ok()) return Fail(s);
  in.groups = groups;
  in.img_per_s = 2800;
  in.wire = "fp16";
  in.batch = 256;
  in.overlap = true;
  Json rows = Json::array();
  if (!FLAGS_json) {
    std::printf("| GPUs (workers) | 25 Gb/s: servers | efficiency | img/s | 100 Gb/s: servers | efficiency | img/s |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int workers : {8, 16, 64, 256}) {
    if (!FLAGS_json) std::printf("| %d |", workers);
    for (double gbps : {25.0, 100.0}) {
      in.workers = workers;
      in.gbps = gbps;
      std::vector<PlanResult> sweep;
      int pick = 0;
      s = SweepServers(in, &sweep, &pick);
      if (!s.ok()) return Fail(s);
      const PlanResult& r = sweep[pick];
      rows.push_back(Json{{"workers", workers}, {"gbps", gbps}, {"recommended_servers", r.inputs.servers},
                          {"efficiency", r.efficiency}, {"img_per_s", r.img_per_s}, {"step_ms", r.step_s * 1e3}});
      if (!FLAGS_json) std::printf(" %d | %.1f%% | %.0f |", r.inputs.servers, 100 * r.efficiency, r.img_per_s);
    }
    if (!FLAGS_json) std::printf("\n");
  }
  if (FLAGS_json) {
    Json out{{"table", rows}};
    out["worker_img_per_s"] = 2800;
    out["wire"] = "fp16";
    out["batch"] = 256;
    out["latency_us"] = in.latency_us;
    out["server_gbs"] = in.server_gbs;
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}

}  // namespace

int PlanCommand(int argc, char** argv) {
  ParseFlags(kUsage, &argc, &argv, {__FILE__});
  PlanInputs in = InputsFromFlags();
  if (FLAGS_table) return RunTable(in);
  if (gflags::GetCommandLineFlagInfoOrDie("workers").is_default) {
    return Fail(Status::InvalidArgument("--workers is required: the job's worker count"));
  }
  if (gflags::GetCommandLineFlagInfoOrDie("img_per_s").is_default) {
    return Fail(Status::InvalidArgument("--img-per-s is required: one worker's training speed alone, images/s"));
  }
  if (FLAGS_servers < 0) {
    return Fail(Status::InvalidArgument("--servers must be 0 (every count from 1 to --workers) or more (got " +
                                        std::to_string(FLAGS_servers) + ")"));
  }
  const bool sweep_all = gflags::GetCommandLineFlagInfoOrDie("servers").is_default || FLAGS_servers == 0;
  if (!sweep_all) {
    PlanResult r;
    Status s = Predict(in, &r);
    if (!s.ok()) return Fail(s);
    if (FLAGS_json) {
      Json out = InputsJson(r.inputs);
      out.update(ResultJson(r));
      std::printf("%s\n", out.dump().c_str());
    } else {
      PrintInputs(r.inputs);
      PrintOne(r);
    }
    return 0;
  }
  std::vector<PlanResult> sweep;
  int pick = 0;
  Status s = SweepServers(in, &sweep, &pick);
  if (!s.ok()) return Fail(s);
  if (FLAGS_json) {
    Json out = InputsJson(in);
    out["recommended_servers"] = sweep[pick].inputs.servers;
    Json all = Json::array();
    for (const PlanResult& r : sweep) all.push_back(ResultJson(r));
    out["predictions"] = all;
    std::printf("%s\n", out.dump().c_str());
  } else {
    PrintInputs(in);
    PrintSweep(sweep, pick);
  }
  return 0;
}

}  // namespace tally
