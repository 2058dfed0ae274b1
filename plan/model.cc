#include "plan/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "compress/compress.h"
#include "kvstore/placement.h"
#include "plan/simulate.h"

namespace tally {
namespace {

using plan_internal::Links;
using plan_internal::Transfer;

// Bounds that keep a replay to a second or so and its memory small (Placement holds a slice
// per key and server); far beyond any job Tally has run.
constexpr int kMaxWorkers = 100000;
constexpr int kMaxServers = 4096;

std::string Number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

Status NeedPositive(const char* flag, double v, const char* unit) {
  if (std::isfinite(v) && v > 0) return Status::Ok();
  return Status::InvalidArgument(std::string(flag) + " must be a positive number of " + unit + " (got " +
                                 Number(v) + ")");
}

Status Validate(const PlanInputs& in) {
  if (in.workers < 1 || in.workers > kMaxWorkers) {
    return Status::InvalidArgument("--workers must be between 1 and " + std::to_string(kMaxWorkers) + " (got " +
                                   std::to_string(in.workers) + ")");
  }
  if (in.servers < 1 || in.servers > kMaxServers) {
    return Status::InvalidArgument("--servers must be between 1 and " + std::to_string(kMaxServers) + " (got " +
                                   std::to_string(in.servers) + ")");
  }
  TALLY_RETURN_IF_ERROR(NeedPositive("--gbps", in.gbps, "Gb/s"));
  TALLY_RETURN_IF_ERROR(NeedPositive("--img-per-s", in.img_per_s, "images per second"));
  TALLY_RETURN_IF_ERROR(NeedPositive("--server-gbs", in.server_gbs, "GB/s"));
  if (in.wire != "fp16" && in.wire != "fp32" && in.wire != "2bit") {
    return Status::InvalidArgument("--wire must be fp16, fp32 or 2bit (got '" + in.wire + "')");
  }
  if (in.batch < 1) return Status::InvalidArgument("--batch must be at least 1 (got " + std::to_string(in.batch) + ")");
  if (!std::isfinite(in.latency_us) || in.latency_us < 0) {
    return Status::InvalidArgument("--latency-us must be a number of microseconds >= 0 (got " +
                                   Number(in.latency_us) + ")");
  }
  if (in.mtu < 576 || in.mtu > 65536) {
    return Status::InvalidArgument("--mtu must be between 576 and 65536 bytes (got " + std::to_string(in.mtu) + ")");
  }
  if (in.frame_bytes < 0 || in.frame_bytes > 1000) {
    return Status::InvalidArgument("--frame-bytes must be between 0 and 1000 (got " + std::to_string(in.frame_bytes) + ")");
  }
  if (in.steps <= kWarmupSteps) {
    return Status::InvalidArgument("plan steps must be more than " + std::to_string(kWarmupSteps) + " (got " +
                                   std::to_string(in.steps) + ")");
  }
  return Status::Ok();
}

// One request per slice part of every key, keys numbered 0.. in forward order as the kvstore
// numbers them, so that a request's index is also its priority rank (priority = -key).
struct Requests {
  std::vector<Transfer> transfers;  // ready times filled in per step
  std::vector<int> group;           // the group whose backward releases each one
  // The answers' bytes, request by request: the pushes' but for 2bit, whose pushes carry
  // 2 bits a value and whose answers fp16 values. They also measure the servers' work,
  // which is per value whatever the push's encoding.
  std::vector<double> answer_bytes;
};

Requests BuildRequests(const PlanInputs& in) {
  std::vector<int64_t> sizes;
  std::vector<int> group_of_key;
  for (size_t g = 0; g < in.groups.size(); ++g) {
    for (int64_t n : in.groups[g].numel) {
      sizes.push_back(n);
      group_of_key.push_back(static_cast<int>(g));
    }
  }
  const double value_bytes = in.wire == "fp32" ? 4 : 2;
  const Placement placement = Placement::Compute(sizes, in.servers);
  Requests r;
  for (int k = 0; k < placement.num_keys(); ++k) {
    for (const Placement::Slice& s : placement.slices(k)) {
      const double values = static_cast<double>(s.length) * value_bytes;
      const double pushed =
          in.wire == "2bit" ? static_cast<double>(PackedBytes(CompressionType::kTwoBit, s.length)) : values;
      r.transfers.push_back({0, s.server, pushed});
      r.answer_bytes.push_back(values);
      r.group.push_back(group_of_key[k]);
    }
  }
  return r;
}

// The compute side of one step: forward group by group, each waiting for its answers (or,
// overlap off, for all of them), then backward in reverse. Returns the forward's start.
double RunCompute(const std::vector<double>& forward_s, const std::vector<double>& group_ready,
                  double* now, std::vector<double>* backward_done) {
  const size_t groups = forward_s.size();
  double start = 0;
  for (size_t g = 0; g < groups; ++g) {
    *now = std::max(*now, group_ready[g]);
    if (g == 0) start = *now;
    *now += forward_s[g];
  }
  for (size_t g = groups; g-- > 0;) {
    *now += 2 * forward_s[g];
    (*backward_done)[g] = *now;
  }
  return start;
}

void FillBusy(const PlanInputs& in, const Requests& r, double bytes_per_s, PlanResult* out) {
  // Per direction (links are full duplex): pushes up, answers down; and the servers' work.
  std::vector<double> up(in.servers, 0), down(in.servers, 0);
  double up_total = 0, down_total = 0;
  for (size_t i = 0; i < r.transfers.size(); ++i) {
    up[r.transfers[i].server] += r.transfers[i].bytes;
    down[r.transfers[i].server] += r.answer_bytes[i];
    up_total += r.transfers[i].bytes;
    down_total += r.answer_bytes[i];
  }
  const double most_up = *std::max_element(up.begin(), up.end());
  const double most_down = *std::max_element(down.begin(), down.end());
  out->bytes_per_worker = up_total;
  out->bytes_per_worker_pulled = down_total;
  out->requests_per_worker = static_cast<int>(r.transfers.size());
  out->busy.worker_link = std::max(up_total, down_total) / bytes_per_s;
  out->busy.server_link = in.workers * std::max(most_up, most_down) / bytes_per_s;
  out->busy.server_cpu = in.workers * most_down / (in.server_gbs * 1e9);
  const PlanBusy& b = out->busy;
  out->busiest = b.worker_link >= b.server_link && b.worker_link >= b.server_cpu ? "worker link"
                 : b.server_link >= b.server_cpu                                 ? "server link"
                                                                                 : "server CPU";
}

}  // namespace

Status Predict(const PlanInputs& inputs, PlanResult* out) {
  TALLY_RETURN_IF_ERROR(Validate(inputs));
  *out = PlanResult();
  out->inputs = inputs;
  PlanInputs& in = out->inputs;
  if (in.groups.empty()) TALLY_RETURN_IF_ERROR(LayerGroups(ModelConfig(), &in.groups));
  const double flops = std::accumulate(in.groups.begin(), in.groups.end(), 0.0,
                                       [](double sum, const LayerGroup& g) { return sum + g.flops; });
  if (!(flops > 0)) return Status::InvalidArgument("plan: the network's groups hold no arithmetic");

  const double compute_s = in.batch / in.img_per_s;
  std::vector<double> forward_s;
  for (const LayerGroup& g : in.groups) forward_s.push_back(compute_s / 3 * g.flops / flops);
  Requests req = BuildRequests(in);
  const size_t n = req.transfers.size();
  // Data bytes per second: the link's rate less the packets' headers and framing.
  const double bytes_per_s = in.gbps * 1e9 / 8 * (in.mtu - 52.0) / (in.mtu + in.frame_bytes);
  const double latency_s = in.latency_us * 1e-6;

  Links up{0, std::vector<double>(in.servers, 0)}, down{0, std::vector<double>(in.servers, 0)};
  std::vector<double> cpu_free(in.servers, 0), answered(n, 0), arrived, answer_ready;
  std::vector<double> group_ready(in.groups.size()), backward_done(in.groups.size());
  std::vector<Transfer> answers = req.transfers;
  for (size_t i = 0; i < n; ++i) answers[i].bytes = req.answer_bytes[i];
  double now = 0;
  std::vector<double> starts;
  for (int step = 0; step <= in.steps; ++step) {
    std::fill(group_ready.begin(), group_ready.end(), 0.0);
    const double all = n == 0 ? 0 : *std::max_element(answered.begin(), answered.end());
    for (size_t i = 0; i < n; ++i) {
      double& ready = group_ready[req.group[i]];
      ready = std::max(ready, in.overlap ? answered[i] : all);
    }
    starts.push_back(RunCompute(forward_s, group_ready, &now, &backward_done));
    if (step == in.steps) break;  // only this forward's start was wanted: it ends the last step
    for (size_t i = 0; i < n; ++i) req.transfers[i].ready = backward_done[req.group[i]];
    plan_internal::SendAll(req.transfers, in.workers, bytes_per_s, latency_s, &up, &arrived);
    plan_internal::UpdateAll(answers, arrived, in.workers, in.server_gbs * 1e9, &cpu_free, &answer_ready);
    for (size_t i = 0; i < n; ++i) answers[i].ready = answer_ready[i];
    plan_internal::SendAll(answers, in.workers, bytes_per_s, latency_s, &down, &answered);
  }
  out->step_s = (starts.back() - starts[kWarmupSteps]) / (in.steps - kWarmupSteps);
  out->compute_s = compute_s;
  out->exposed_s = out->step_s - compute_s;
  out->img_per_s = in.workers * in.batch / out->step_s;
  out->efficiency = out->img_per_s / (in.workers * in.img_per_s);
  FillBusy(in, req, bytes_per_s, out);
  return Status::Ok();
}

int RecommendIndex(const std::vector<PlanResult>& sweep) {
  double best = 0;
  for (const PlanResult& r : sweep) best = std::max(best, r.efficiency);
  int pick = 0;
  for (size_t i = 0; i < sweep.size(); ++i) {
    const PlanResult& r = sweep[i];
    if (r.efficiency < best - kRecommendSlack) continue;
    if (sweep[pick].efficiency < best - kRecommendSlack || r.inputs.servers < sweep[pick].inputs.servers) {
      pick = static_cast<int>(i);
    }
  }
  return pick;
}

Status SweepServers(const PlanInputs& inputs, std::vector<PlanResult>* sweep, int* recommended) {
  PlanInputs in = inputs;
  in.servers = 1;
  TALLY_RETURN_IF_ERROR(Validate(in));
  if (in.groups.empty()) TALLY_RETURN_IF_ERROR(LayerGroups(ModelConfig(), &in.groups));
  sweep->clear();
  const int most = std::min(in.workers, kMaxServers);
  for (int s = 1; s <= most; ++s) {
    in.servers = s;
    PlanResult r;
    TALLY_RETURN_IF_ERROR(Predict(in, &r));
    sweep->push_back(std::move(r));
  }
  *recommended = RecommendIndex(*sweep);
  return Status::Ok();
}

}  // namespace tally
