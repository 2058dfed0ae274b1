// `tally report`'s page: the run's records reduced to what the page draws (at most
// kMaxStepPoints steps per worker and server, kMaxSamplePoints samples per node, each point
// the mean of consecutive records), as JSON, placed into kReportPageTemplate.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "tools/report/html.h"

namespace tally {
namespace {

using nlohmann::json;
using profile::NodeRun;
using profile::Phase;
using profile::StepRecord;

constexpr size_t kMaxStepPoints = 500;
constexpr size_t kMaxSamplePoints = 300;
// A worker's step, in the order the page stacks it; "other" is what the phases leave out.
constexpr Phase kWorkerPhases[] = {Phase::kData, Phase::kH2D,  Phase::kForward, Phase::kBackward,
                                   Phase::kPush, Phase::kPull, Phase::kWait};

// Three decimals are enough for every figure on the page and keep the file small.
json Num(double v) { return std::isfinite(v) ? json(std::round(v * 1000) / 1000) : json(nullptr); }

// [begin, end) ranges of consecutive items: at most max of them, all but the last the same size.
std::vector<std::pair<size_t, size_t>> Buckets(size_t n, size_t max) {
  const size_t per = std::max<size_t>(1, (n + max - 1) / max);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < n; i += per) out.emplace_back(i, std::min(n, i + per));
  return out;
}

// The mean of f(item) over [b.first, b.second), skipping non-finite values (NaN if none).
template <typename T, typename F>
double Mean(const std::vector<T>& items, std::pair<size_t, size_t> b, F f) {
  double sum = 0;
  int n = 0;
  for (size_t i = b.first; i < b.second; ++i) {
    const double v = f(items[i]);
    if (std::isfinite(v)) sum += v, ++n;
  }
  return n ? sum / n : std::nan("");
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (seconds < 120) return Fixed(seconds, 1) + " s";
  if (s < 7200) return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  return std::to_string(s / 3600) + " h " + std::to_string(s % 3600 / 60) + " min";
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

int64_t OtherUs(const StepRecord& r) {
  int64_t parts = 0;
  for (Phase p : kWorkerPhases) parts += r.phase(p);
  return std::max<int64_t>(0, r.dur_us - parts);
}

// A worker's steps after the warm-up (all of them when there are no more).
std::vector<StepRecord> Measured(const NodeRun& n, int warmup) {
  if (static_cast<int>(n.steps.size()) <= warmup) return n.steps;
  return std::vector<StepRecord>(n.steps.begin() + warmup, n.steps.end());
}

// The scheduler-clock span of everything the run recorded.
void RunSpan(const std::vector<NodeRun>& nodes, int64_t* t0, int64_t* t1) {
  *t0 = std::numeric_limits<int64_t>::max();
  *t1 = std::numeric_limits<int64_t>::min();
  auto see = [&](int64_t t) { *t0 = std::min(*t0, t), *t1 = std::max(*t1, t); };
  for (const NodeRun& n : nodes) {
    const int64_t off = n.meta.clock_offset_us;
    if (n.meta.start_us > 0) see(n.meta.start_us + off);
    for (const StepRecord& r : n.steps) see(r.start_us + off), see(r.start_us + r.dur_us + off);
    for (const profile::MonitorSample& s : n.samples) see(s.t_us + off);
  }
  if (*t0 > *t1) *t0 = *t1 = 0;
}

json WorkerSteps(const NodeRun& n, int64_t t0) {
  json w = {{"node", n.meta.node}, {"host", n.meta.host}};
  const auto buckets = Buckets(n.steps.size(), kMaxStepPoints);
  w["per"] = buckets.empty() ? 1 : buckets[0].second - buckets[0].first;
  json step = json::array(), t = json::array(), dur = json::array(), dur_max = json::array(),
       other = json::array(), loss = json::array(), acc = json::array();
  std::map<std::string, json> phases;
  for (const auto& b : buckets) {
    const StepRecord& first = n.steps[b.first];
    step.push_back(first.step);
    t.push_back(Num((first.start_us + n.meta.clock_offset_us - t0) / 1e6));
    dur.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return r.dur_us / 1e3; })));
    int64_t longest = 0;
    for (size_t i = b.first; i < b.second; ++i) longest = std::max(longest, n.steps[i].dur_us);
    dur_max.push_back(Num(longest / 1e3));
    for (Phase p : kWorkerPhases) {
      phases[profile::PhaseName(p)].push_back(Num(Mean(n.steps, b, [p](const StepRecord& r) { return r.phase(p) / 1e3; })));
    }
    other.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return OtherUs(r) / 1e3; })));
    auto with_samples = [](double v, const StepRecord& r) { return r.samples > 0 && r.has_metrics ? v : std::nan(""); };
    loss.push_back(Num(Mean(n.steps, b, [&](const StepRecord& r) { return with_samples(r.loss, r); })));
    acc.push_back(Num(Mean(n.steps, b, [&](const StepRecord& r) { return with_samples(r.accuracy, r); })));
  }
  w["step"] = step;
  w["t"] = t;
  w["dur"] = dur;
  w["dur_max"] = dur_max;
  for (auto& [name, values] : phases) w[name] = values;
  w["other"] = other;
  w["loss"] = loss;
  w["acc"] = acc;
  return w;
}

// The mean split of a worker's measured steps, in ms.
json WorkerSplit(const NodeRun& n, int warmup) {
  const std::vector<StepRecord> steps = Measured(n, warmup);
  const std::pair<size_t, size_t> all(0, steps.size());
  json s = {{"node", n.meta.node}, {"steps", steps.size()}};
  for (Phase p : kWorkerPhases) {
    s[profile::PhaseName(p)] = Num(Mean(steps, all, [p](const StepRecord& r) { return r.phase(p) / 1e3; }));
  }
  s["other"] = Num(Mean(steps, all, [](const StepRecord& r) { return OtherUs(r) / 1e3; }));
  s["dur"] = Num(Mean(steps, all, [](const StepRecord& r) { return r.dur_us / 1e3; }));
  return s;
}

json ServerLoad(const NodeRun& n) {
  json s = {{"node", n.meta.node}, {"host", n.meta.host}};
  const auto buckets = Buckets(n.steps.size(), kMaxStepPoints);
  s["per"] = buckets.empty() ? 1 : buckets[0].second - buckets[0].first;
  json step = json::array(), sum = json::array(), update = json::array(), mb_in = json::array(),
       mb_out = json::array(), requests = json::array();
  for (const auto& b : buckets) {
    step.push_back(n.steps[b.first].step);
    sum.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return r.phase(Phase::kSum) / 1e3; })));
    update.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return r.phase(Phase::kUpdate) / 1e3; })));
    mb_in.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return r.bytes_in / 1e6; })));
    mb_out.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return r.bytes_out / 1e6; })));
    requests.push_back(Num(Mean(n.steps, b, [](const StepRecord& r) { return static_cast<double>(r.requests); })));
  }
  double sum_s = 0, update_s = 0, gb_in = 0, gb_out = 0, reqs = 0;
  for (const StepRecord& r : n.steps) {
    sum_s += r.phase(Phase::kSum) / 1e6;
    update_s += r.phase(Phase::kUpdate) / 1e6;
    gb_in += r.bytes_in / 1e9;
    gb_out += r.bytes_out / 1e9;
    reqs += r.requests;
  }
  s.update({{"step", step}, {"sum", sum}, {"update", update}, {"mb_in", mb_in}, {"mb_out", mb_out},
            {"requests", requests}, {"steps", n.steps.size()}, {"sum_s", Num(sum_s)}, {"update_s", Num(update_s)},
            {"gb_in", Num(gb_in)}, {"gb_out", Num(gb_out)}, {"total_requests", reqs}});
  return s;
}

json SystemUse(const NodeRun& n, int64_t t0) {
  const auto& v = n.samples;
  json s = {{"node", n.meta.node}, {"host", n.meta.host}};
  const auto buckets = Buckets(v.size(), kMaxSamplePoints);
  s["per"] = buckets.empty() ? 1 : buckets[0].second - buckets[0].first;
  size_t cores = 0, gpus = 0;
  int64_t mem_total = 0, gpu_mem_total = 0;
  for (const profile::MonitorSample& m : v) {
    cores = std::max(cores, m.cpu.size());
    gpus = std::max(gpus, m.gpus.size());
    mem_total = std::max(mem_total, m.mem_total);
    for (const profile::GpuSample& g : m.gpus) gpu_mem_total = std::max(gpu_mem_total, g.mem_total);
  }
  json t = json::array(), cpu_total = json::array(), iowait = json::array(), proc = json::array(),
       mem = json::array(), rx = json::array(), tx = json::array(), dr = json::array(), dw = json::array();
  json core_rows(cores, json::array()), gpu_util(gpus, json::array()), gpu_mem(gpus, json::array());
  using S = profile::MonitorSample;
  for (const auto& b : buckets) {
    t.push_back(Num((v[b.first].t_us + n.meta.clock_offset_us - t0) / 1e6));
    for (size_t c = 0; c < cores; ++c) {
      core_rows[c].push_back(Num(Mean(v, b, [c](const S& m) { return c < m.cpu.size() ? m.cpu[c] : std::nan(""); })));
    }
    for (size_t g = 0; g < gpus; ++g) {
      gpu_util[g].push_back(Num(Mean(v, b, [g](const S& m) { return g < m.gpus.size() ? m.gpus[g].util : std::nan(""); })));
      gpu_mem[g].push_back(Num(Mean(v, b, [g](const S& m) {
        return g < m.gpus.size() && m.gpus[g].mem_total > 0 ? 100.0 * m.gpus[g].mem_used / m.gpus[g].mem_total
                                                            : std::nan("");
      })));
    }
    cpu_total.push_back(Num(Mean(v, b, [](const S& m) { return m.cpu_total; })));
    iowait.push_back(Num(Mean(v, b, [](const S& m) { return m.iowait; })));
    proc.push_back(Num(Mean(v, b, [](const S& m) { return m.process_cpu; })));
    mem.push_back(Num(Mean(v, b, [](const S& m) {
      return m.mem_total > 0 ? 100.0 * m.mem_used / m.mem_total : std::nan("");
    })));
    rx.push_back(Num(Mean(v, b, [](const S& m) { return m.net_rx_bps / 1e6; })));
    tx.push_back(Num(Mean(v, b, [](const S& m) { return m.net_tx_bps / 1e6; })));
    dr.push_back(Num(Mean(v, b, [](const S& m) { return m.disk_read_bps / 1e6; })));
    dw.push_back(Num(Mean(v, b, [](const S& m) { return m.disk_write_bps / 1e6; })));
  }
  s.update({{"t", t}, {"cores", core_rows}, {"cpu_total", cpu_total}, {"iowait", iowait}, {"proc_cpu", proc},
            {"mem", mem}, {"mem_total_gb", Num(mem_total / 1e9)}, {"net_rx", rx}, {"net_tx", tx},
            {"disk_r", dr}, {"disk_w", dw}, {"gpu_util", gpu_util}, {"gpu_mem", gpu_mem},
            {"gpu_mem_total_gb", Num(gpu_mem_total / 1e9)}});
  return s;
}

json FindingJson(const profile::Finding& f) {
  return {{"rule", f.rule},       {"node", f.node},     {"step", f.step},
          {"message", f.message}, {"advice", f.advice}, {"evidence", f.evidence}};
}

std::string Config(const std::vector<NodeRun>& nodes, const std::string& key) {
  for (const NodeRun& n : nodes) {
    auto it = n.meta.config.find(key);
    if (it != n.meta.config.end() && !it->second.empty()) return it->second;
  }
  return "";
}

// The summary's rows, [label, text], and the job's configuration (the first worker's, else
// the first node's).
json Summary(const std::vector<NodeRun>& nodes, const std::string& run_dir, int warmup, int64_t t0,
             int64_t t1, size_t findings) {
  int workers = 0, servers = 0;
  std::map<std::string, std::string> hosts;  // host -> its nodes
  for (const NodeRun& n : nodes) {
    workers += n.meta.role == "worker";
    servers += n.meta.role == "server";
    std::string& list = hosts[n.meta.host.empty() ? "?" : n.meta.host];
    list += (list.empty() ? "" : ", ") + n.meta.node;
  }
  json rows = json::array();
  auto row = [&rows](const std::string& label, const std::string& text) {
    if (!text.empty()) rows.push_back({label, text});
  };
  row("run directory", run_dir);
  row("nodes", std::to_string(nodes.size() - workers - servers) + " scheduler, " + std::to_string(servers) +
                   " server(s), " + std::to_string(workers) + " worker(s)");
  std::string host_text;
  for (const auto& [host, list] : hosts) host_text += (host_text.empty() ? "" : "; ") + host + ": " + list;
  row("hosts", std::to_string(hosts.size()) + " (" + host_text + ")");
  std::string network = Config(nodes, "network");
  if (!network.empty() && !Config(nodes, "num_layers").empty()) network += "-" + Config(nodes, "num_layers");
  if (!Config(nodes, "image_shape").empty()) network += ", image " + Config(nodes, "image_shape");
  row("network", network);
  row("kvstore", Config(nodes, "kv_store"));
  const std::string batch = Config(nodes, "batch_size");
  if (!batch.empty()) {
    const int global = std::atoi(batch.c_str()) * std::max(1, workers);
    row("batch size", batch + " per worker, " + std::to_string(global) + " per step");
  }
  row("dtype", Config(nodes, "dtype"));

  std::vector<double> durs;
  double throughput = 0;
  int64_t max_steps = 0, last_step = -1, last_epoch = -1;
  std::string per_worker;
  for (const NodeRun& n : nodes) {
    if (n.meta.role != "worker" || n.steps.empty()) continue;
    max_steps = std::max<int64_t>(max_steps, n.steps.size());
    last_step = std::max(last_step, n.steps.back().step);
    last_epoch = std::max(last_epoch, n.steps.back().epoch);
    const std::vector<StepRecord> m = Measured(n, warmup);
    int64_t samples = 0;
    for (const StepRecord& r : m) durs.push_back(r.dur_us / 1e3), samples += r.samples;
    const double wall_s = (m.back().start_us + m.back().dur_us - m.front().start_us) / 1e6;
    const double rate = wall_s > 0 ? samples / wall_s : 0;
    throughput += rate;
    per_worker += (per_worker.empty() ? "" : ", ") + n.meta.node + " " + Fixed(rate, 1);
  }
  if (max_steps > 0) {
    row("steps", std::to_string(max_steps) + " per worker (last step " + std::to_string(last_step) +
                     (last_epoch >= 0 ? ", epoch " + std::to_string(last_epoch) : "") + ")");
    double mean = 0;
    for (double d : durs) mean += d / durs.size();
    row("step time", "mean " + Fixed(mean, 2) + " ms, median " + Fixed(Quantile(durs, 0.5), 2) + " ms, p95 " +
                         Fixed(Quantile(durs, 0.95), 2) + " ms (over all workers, after " + std::to_string(warmup) +
                         " warm-up steps)");
    row("throughput", Fixed(throughput, 1) + " samples/s over all workers (" + per_worker + ")");
  } else {
    row("steps", "no worker recorded a step");
  }
  row("run length", Duration((t1 - t0) / 1e6) + " (first to last record, on the scheduler's clock)");
  int64_t worst_rtt = -1, worst_offset = 0;
  for (const NodeRun& n : nodes) {
    worst_rtt = std::max(worst_rtt, n.meta.clock_rtt_us);
    if (std::llabs(n.meta.clock_offset_us) > std::llabs(worst_offset)) worst_offset = n.meta.clock_offset_us;
  }
  row("clocks", "largest offset to the scheduler " + Fixed(worst_offset / 1e3, 3) + " ms; worst round trip " +
                    (worst_rtt < 0 ? std::string("unmeasured") : Fixed(worst_rtt / 1e3, 3) + " ms") +
                    " (aligned within about half of it)");
  row("findings", std::to_string(findings) + (findings == 1 ? " rule fired" : " rules fired"));

  std::map<std::string, std::string> config;
  for (const NodeRun& n : nodes) {
    if (n.meta.role == "worker" || config.empty()) config = n.meta.config;
    if (n.meta.role == "worker") break;
  }
  return {{"rows", rows}, {"config", config}};
}

// The data as a JSON text that is safe inside <script>: no '<', '>' or '&' at all (they only
// occur inside JSON strings, where the \u escapes mean the same characters).
std::string ScriptSafe(const json& data) {
  const std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

}  // namespace

std::string ReportPage(const std::string& run_dir, const std::vector<profile::NodeRun>& nodes,
                       const std::vector<profile::Finding>& findings, const profile::RuleConfig& rules) {
  int64_t t0 = 0, t1 = 0;
  RunSpan(nodes, &t0, &t1);
  json data = {{"run_dir", run_dir}, {"warmup", rules.warmup_steps}};
  data["summary"] = Summary(nodes, run_dir, rules.warmup_steps, t0, t1, findings.size());
  json node_rows = json::array(), split = json::array(), workers = json::array(), servers = json::array(),
       system = json::array(), online = json::array(), found = json::array();
  for (const NodeRun& n : nodes) {
    node_rows.push_back({{"node", n.meta.node},
                         {"role", n.meta.role},
                         {"host", n.meta.host},
                         {"pid", n.meta.pid},
                         {"offset_ms", Num(n.meta.clock_offset_us / 1e3)},
                         {"rtt_ms", n.meta.clock_rtt_us < 0 ? json(nullptr) : Num(n.meta.clock_rtt_us / 1e3)},
                         {"steps", n.steps.size()},
                         {"samples", n.samples.size()},
                         {"findings", n.findings.size()}});
    if (n.meta.role == "worker") {
      workers.push_back(WorkerSteps(n, t0));
      if (!n.steps.empty()) split.push_back(WorkerSplit(n, rules.warmup_steps));
    }
    if (n.meta.role == "server") servers.push_back(ServerLoad(n));
    if (!n.samples.empty()) system.push_back(SystemUse(n, t0));
    for (const profile::Finding& f : n.findings) online.push_back(FindingJson(f));
  }
  for (const profile::Finding& f : findings) found.push_back(FindingJson(f));
  data.update({{"nodes", node_rows}, {"split", split}, {"workers", workers}, {"servers", servers},
               {"system", system}, {"findings", found}, {"online_findings", online}});

  std::string page = kReportPageTemplate;
  const std::string marker = "@DATA@";
  const size_t at = page.find(marker);
  CHECK_NE(at, std::string::npos) << "kReportPageTemplate lacks " << marker;
  page.replace(at, marker.size(), ScriptSafe(data));
  return page;
}

}  // namespace tally
