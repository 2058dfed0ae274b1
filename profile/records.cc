#include "profile/records.h"

#include <time.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "base/fault_hooks.h"

namespace tally {
namespace profile {
namespace {

using nlohmann::json;

// JSON has no NaN or Infinity: non-finite numbers travel as the strings "nan", "inf", "-inf".
json Number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

Status Parse(const std::string& text, const char* what, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    return Status::InvalidArgument(std::string("not a JSON object (") + what + "): " + text.substr(0, 80));
  }
  return Status::Ok();
}

// Reads j[key] into *v when present; fails when it has the wrong type.
template <typename T>
Status Get(const json& j, const char* key, T* v, bool required = false) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? Status::InvalidArgument(std::string("no \"") + key + "\"") : Status::Ok();
  }
  if constexpr (std::is_same_v<T, double>) {
    if (it->is_string()) {
      const std::string s = it->get<std::string>();
      if (s == "nan") *v = std::nan("");
      else if (s == "inf") *v = INFINITY;
      else if (s == "-inf") *v = -INFINITY;
      else return Status::InvalidArgument(std::string("\"") + key + "\" is not a number");
      return Status::Ok();
    }
    if (!it->is_number()) return Status::InvalidArgument(std::string("\"") + key + "\" is not a number");
    *v = it->get<double>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number()) return Status::InvalidArgument(std::string("\"") + key + "\" is not a number");
    *v = static_cast<T>(it->get<double>());
  } else {
    if (!it->is_string()) return Status::InvalidArgument(std::string("\"") + key + "\" is not a string");
    *v = it->get<std::string>();
  }
  return Status::Ok();
}

}  // namespace

int64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000 + FaultHooksInEffect().clock_skew_us;
}

const char* PhaseName(Phase p) {
  static const char* const kNames[kNumPhases] = {"data", "h2d", "fwd", "bwd", "push", "pull", "wait", "sum", "update"};
  return kNames[static_cast<int>(p)];
}

std::string Finding::Line() const {
  std::string out = "tally: " + node;
  if (step >= 0) out += " step " + std::to_string(step);
  out += ": " + rule + ": " + message;
  if (!advice.empty()) out += " -> " + advice;
  return out;
}

std::string ToJson(const StepRecord& r) {
  json j;
  j["step"] = r.step;
  if (r.epoch >= 0) j["epoch"] = r.epoch;
  if (r.batch >= 0) j["batch"] = r.batch;
  j["start_us"] = r.start_us;
  j["dur_us"] = r.dur_us;
  for (int p = 0; p < kNumPhases; ++p) {
    if (r.phase_us[p] != 0) j[std::string(PhaseName(static_cast<Phase>(p))) + "_us"] = r.phase_us[p];
  }
  if (r.samples > 0) j["samples"] = r.samples;
  if (r.samples > 0 && r.has_metrics) {
    j["loss"] = Number(r.loss);
    j["accuracy"] = Number(r.accuracy);
  }
  if (r.grad_norm != -1) j["grad_norm"] = Number(r.grad_norm);
  if (r.requests > 0) {
    j["requests"] = r.requests;
    j["bytes_in"] = r.bytes_in;
    j["bytes_out"] = r.bytes_out;
  }
  return j.dump();
}

Status FromJson(const std::string& text, StepRecord* r) {
  json j;
  TALLY_RETURN_IF_ERROR(Parse(text, "step record", &j));
  *r = StepRecord();
  TALLY_RETURN_IF_ERROR(Get(j, "step", &r->step, true));
  TALLY_RETURN_IF_ERROR(Get(j, "epoch", &r->epoch));
  TALLY_RETURN_IF_ERROR(Get(j, "batch", &r->batch));
  TALLY_RETURN_IF_ERROR(Get(j, "start_us", &r->start_us, true));
  TALLY_RETURN_IF_ERROR(Get(j, "dur_us", &r->dur_us, true));
  for (int p = 0; p < kNumPhases; ++p) {
    const std::string key = std::string(PhaseName(static_cast<Phase>(p))) + "_us";
    TALLY_RETURN_IF_ERROR(Get(j, key.c_str(), &r->phase_us[p]));
  }
  TALLY_RETURN_IF_ERROR(Get(j, "samples", &r->samples));
  r->has_metrics = j.contains("loss");
  TALLY_RETURN_IF_ERROR(Get(j, "loss", &r->loss));
  TALLY_RETURN_IF_ERROR(Get(j, "accuracy", &r->accuracy));
  TALLY_RETURN_IF_ERROR(Get(j, "grad_norm", &r->grad_norm));
  TALLY_RETURN_IF_ERROR(Get(j, "requests", &r->requests));
  TALLY_RETURN_IF_ERROR(Get(j, "bytes_in", &r->bytes_in));
  TALLY_RETURN_IF_ERROR(Get(j, "bytes_out", &r->bytes_out));
  return Status::Ok();
}

std::string ToJson(const MonitorSample& s) {
  json j;
  j["t_us"] = s.t_us;
  j["cpu"] = s.cpu;
  j["cpu_total"] = s.cpu_total;
  j["iowait"] = s.iowait;
  j["process_cpu"] = s.process_cpu;
  j["mem_used"] = s.mem_used;
  j["mem_total"] = s.mem_total;
  j["net_rx_bps"] = s.net_rx_bps;
  j["net_tx_bps"] = s.net_tx_bps;
  j["disk_read_bps"] = s.disk_read_bps;
  j["disk_write_bps"] = s.disk_write_bps;
  if (!s.gpus.empty()) {
    json gpus = json::array();
    for (const GpuSample& g : s.gpus) gpus.push_back({{"util", g.util}, {"mem_used", g.mem_used}, {"mem_total", g.mem_total}});
    j["gpus"] = gpus;
  }
  return j.dump();
}

Status FromJson(const std::string& text, MonitorSample* s) {
  json j;
  TALLY_RETURN_IF_ERROR(Parse(text, "monitor sample", &j));
  *s = MonitorSample();
  TALLY_RETURN_IF_ERROR(Get(j, "t_us", &s->t_us, true));
  auto cpu = j.find("cpu");
  if (cpu != j.end()) {
    if (!cpu->is_array()) return Status::InvalidArgument("\"cpu\" is not an array");
    for (const json& c : *cpu) {
      if (!c.is_number()) return Status::InvalidArgument("\"cpu\" holds a non-number");
      s->cpu.push_back(c.get<double>());
    }
  }
  TALLY_RETURN_IF_ERROR(Get(j, "cpu_total", &s->cpu_total));
  TALLY_RETURN_IF_ERROR(Get(j, "iowait", &s->iowait));
  TALLY_RETURN_IF_ERROR(Get(j, "process_cpu", &s->process_cpu));
  TALLY_RETURN_IF_ERROR(Get(j, "mem_used", &s->mem_used));
  TALLY_RETURN_IF_ERROR(Get(j, "mem_total", &s->mem_total));
  TALLY_RETURN_IF_ERROR(Get(j, "net_rx_bps", &s->net_rx_bps));
  TALLY_RETURN_IF_ERROR(Get(j, "net_tx_bps", &s->net_tx_bps));
  TALLY_RETURN_IF_ERROR(Get(j, "disk_read_bps", &s->disk_read_bps));
  TALLY_RETURN_IF_ERROR(Get(j, "disk_write_bps", &s->disk_write_bps));
  auto gpus = j.find("gpus");
  if (gpus != j.end()) {
    if (!gpus->is_array()) return Status::InvalidArgument("\"gpus\" is not an array");
    for (const json& g : *gpus) {
      if (!g.is_object()) return Status::InvalidArgument("\"gpus\" holds a non-object");
      GpuSample out;
      TALLY_RETURN_IF_ERROR(Get(g, "util", &out.util));
      TALLY_RETURN_IF_ERROR(Get(g, "mem_used", &out.mem_used));
      TALLY_RETURN_IF_ERROR(Get(g, "mem_total", &out.mem_total));
      s->gpus.push_back(out);
    }
  }
  return Status::Ok();
}

std::string ToJson(const Finding& f) {
  json j;
  j["rule"] = f.rule;
  j["node"] = f.node;
  j["step"] = f.step;
  j["message"] = f.message;
  j["advice"] = f.advice;
  j["evidence"] = f.evidence;
  return j.dump();
}

Status FromJson(const std::string& text, Finding* f) {
  json j;
  TALLY_RETURN_IF_ERROR(Parse(text, "finding", &j));
  *f = Finding();
  TALLY_RETURN_IF_ERROR(Get(j, "rule", &f->rule, true));
  TALLY_RETURN_IF_ERROR(Get(j, "node", &f->node, true));
  TALLY_RETURN_IF_ERROR(Get(j, "step", &f->step));
  TALLY_RETURN_IF_ERROR(Get(j, "message", &f->message, true));
  TALLY_RETURN_IF_ERROR(Get(j, "advice", &f->advice));
  TALLY_RETURN_IF_ERROR(Get(j, "evidence", &f->evidence));
  return Status::Ok();
}

std::string ToJson(const NodeMeta& m) {
  json j;
  j["node"] = m.node;
  j["role"] = m.role;
  j["rank"] = m.rank;
  j["host"] = m.host;
  j["pid"] = m.pid;
  j["start_us"] = m.start_us;
  j["clock_offset_us"] = m.clock_offset_us;
  j["clock_rtt_us"] = m.clock_rtt_us;
  j["config"] = m.config;
  return j.dump();
}

Status FromJson(const std::string& text, NodeMeta* m) {
  json j;
  TALLY_RETURN_IF_ERROR(Parse(text, "node meta", &j));
  *m = NodeMeta();
  TALLY_RETURN_IF_ERROR(Get(j, "node", &m->node, true));
  TALLY_RETURN_IF_ERROR(Get(j, "role", &m->role, true));
  TALLY_RETURN_IF_ERROR(Get(j, "rank", &m->rank));
  TALLY_RETURN_IF_ERROR(Get(j, "host", &m->host));
  TALLY_RETURN_IF_ERROR(Get(j, "pid", &m->pid));
  TALLY_RETURN_IF_ERROR(Get(j, "start_us", &m->start_us));
  TALLY_RETURN_IF_ERROR(Get(j, "clock_offset_us", &m->clock_offset_us));
  TALLY_RETURN_IF_ERROR(Get(j, "clock_rtt_us", &m->clock_rtt_us));
  auto config = j.find("config");
  if (config != j.end()) {
    if (!config->is_object()) return Status::InvalidArgument("\"config\" is not an object");
    for (auto it = config->begin(); it != config->end(); ++it) {
      if (!it.value().is_string()) return Status::InvalidArgument("config \"" + it.key() + "\" is not a string");
      m->config[it.key()] = it.value().get<std::string>();
    }
  }
  return Status::Ok();
}

}  // namespace profile
}  // namespace tally
