#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "net/cluster.h"

namespace tally {
namespace {

Status ReadInt(const char* name, int lo, int hi, bool required, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return required ? Status::InvalidArgument("environment variable " + std::string(name) + " is not set")
                    : Status::Ok();
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    return Status::InvalidArgument("environment variable " + std::string(name) + "='" + v +
                                   "' is not an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  }
  *out = static_cast<int>(x);
  return Status::Ok();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// 64 hex digits -> 32 bytes.
Status ParseSecret(const std::string& where, std::string hex, std::string* out) {
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r' || hex.back() == ' ')) hex.pop_back();
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return Status::InvalidArgument(where + " must hold 64 hex digits (32 random bytes), as tools/launch.py writes it");
  }
  out->resize(32);
  for (int i = 0; i < 32; ++i) (*out)[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return Status::Ok();
}

Status ReadSecret(ClusterConfig* cfg) {
  const std::string plain = Env("TALLY_PLAIN"), inline_secret = Env("TALLY_JOB_SECRET"),
                    file = Env("TALLY_JOB_SECRET_FILE");
  if (!plain.empty() && plain != "0" && plain != "1") {
    return Status::InvalidArgument("TALLY_PLAIN='" + plain + "' (expected 1 for a trusted network, or 0)");
  }
  const bool want_plain = plain == "1";
  if (want_plain && (!inline_secret.empty() || !file.empty())) {
    return Status::InvalidArgument("TALLY_PLAIN=1 and a job secret (TALLY_JOB_SECRET or TALLY_JOB_SECRET_FILE) "
                                   "contradict each other: unset one");
  }
  if (!inline_secret.empty() && !file.empty()) {
    return Status::InvalidArgument("both TALLY_JOB_SECRET and TALLY_JOB_SECRET_FILE are set: unset one");
  }
  if (!inline_secret.empty()) return ParseSecret("TALLY_JOB_SECRET", inline_secret, &cfg->job_secret);
  if (!file.empty()) {
    struct stat st;
    if (stat(file.c_str(), &st) != 0) return Status::NotFound("TALLY_JOB_SECRET_FILE " + file + ": no such file");
    if ((st.st_mode & 077) != 0) {
      return Status::InvalidArgument("TALLY_JOB_SECRET_FILE " + file +
                                     " is readable by other users (chmod 600 it)");
    }
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return ParseSecret("TALLY_JOB_SECRET_FILE " + file, text.str(), &cfg->job_secret);
  }
  if (!want_plain) {
    return Status::InvalidArgument(
        "no job secret: start the job with tools/launch.py, which makes one, or set TALLY_JOB_SECRET "
        "(64 hex digits, the same in every process of the job); TALLY_PLAIN=1 runs without "
        "authentication on a trusted network");
  }
  return Status::Ok();
}

}  // namespace

Status ClusterConfigFromEnv(ClusterConfig* cfg) {
  const char* role = std::getenv("DMLC_ROLE");
  if (role == nullptr) return Status::InvalidArgument("environment variable DMLC_ROLE is not set");
  std::string r = role;
  if (r == "scheduler") cfg->role = wire::SCHEDULER;
  else if (r == "server") cfg->role = wire::SERVER;
  else if (r == "worker") cfg->role = wire::WORKER;
  else return Status::InvalidArgument("DMLC_ROLE='" + r + "' (expected scheduler, server or worker)");
  const char* uri = std::getenv("DMLC_PS_ROOT_URI");
  if (uri == nullptr || *uri == '\0') return Status::InvalidArgument("environment variable DMLC_PS_ROOT_URI is not set");
  cfg->scheduler_host = uri;
  TALLY_RETURN_IF_ERROR(ReadInt("DMLC_PS_ROOT_PORT", 1, 65535, true, &cfg->scheduler_port));
  TALLY_RETURN_IF_ERROR(ReadInt("DMLC_NUM_WORKER", 1, 4096, true, &cfg->num_workers));
  TALLY_RETURN_IF_ERROR(ReadInt("DMLC_NUM_SERVER", 1, 4096, true, &cfg->num_servers));
  const char* host = std::getenv("DMLC_NODE_HOST");
  if (host != nullptr && *host != '\0') cfg->host = host;
  else if (cfg->role == wire::SCHEDULER) cfg->host = cfg->scheduler_host;
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_RANK", 0, 4095, false, &cfg->rank));
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_PORT", 0, 65535, false, &cfg->port));
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_HEARTBEAT_MS", 10, 60000, false, &cfg->heartbeat_interval_ms));
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_DEAD_TIMEOUT_MS", 100, 600000, false, &cfg->dead_timeout_ms));
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_REGISTER_TIMEOUT_MS", 100, 3600000, false, &cfg->register_timeout_ms));
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_RESEND_MS", 10, 600000, false, &cfg->resend_ms));
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_SERVER_REPLICAS", 0, 4095, false, &cfg->server_replicas));
  if (cfg->server_replicas >= cfg->num_servers) {
    return Status::InvalidArgument("TALLY_SERVER_REPLICAS=" + std::to_string(cfg->server_replicas) +
                                   ": each replica needs a server of its own, and the job has " +
                                   std::to_string(cfg->num_servers) + " (DMLC_NUM_SERVER)");
  }
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_SPARE_SERVERS", 0, 4095, false, &cfg->spare_servers));
  if (cfg->spare_servers > 0 && cfg->server_replicas == 0) {
    return Status::InvalidArgument("TALLY_SPARE_SERVERS=" + std::to_string(cfg->spare_servers) +
                                   ": a spare takes a lost server's place, which needs TALLY_SERVER_REPLICAS >= 1");
  }
  TALLY_RETURN_IF_ERROR(ReadSecret(cfg));
  if (!cfg->job_secret.empty() && cfg->role != wire::SCHEDULER && cfg->rank < 0) {
    return Status::InvalidArgument("with a job secret every node needs its rank: set TALLY_RANK "
                                   "(tools/launch.py does)");
  }
  const std::string faults = Env("TALLY_TEST_FAULTS");
  if (!faults.empty()) TALLY_RETURN_IF_ERROR(ParseFaultSpec(faults, &cfg->faults));
  if (cfg->dead_timeout_ms <= 2 * cfg->heartbeat_interval_ms) {
    return Status::InvalidArgument("TALLY_DEAD_TIMEOUT_MS must exceed twice TALLY_HEARTBEAT_MS");
  }
  return Status::Ok();
}

Status NewJobTransport(const ClusterConfig& cfg, std::unique_ptr<Transport>* out) {
  std::unique_ptr<Transport> t;
  if (cfg.job_secret.empty()) {
    t = NewZmqTransport();
  } else {
    JobAuth auth;
    auth.secret = cfg.job_secret;
    auth.self = NodeName(cfg.role, cfg.rank);
    auth.job.num_servers = cfg.num_servers;
    auth.job.num_workers = cfg.num_workers;
    auth.job.spare_servers = cfg.spare_servers;
    const int count = cfg.role == wire::SERVER ? cfg.num_servers + cfg.spare_servers : cfg.num_workers;
    if (cfg.role != wire::SCHEDULER && (cfg.rank < 0 || cfg.rank >= count)) {
      return Status::InvalidArgument("TALLY_RANK=" + std::to_string(cfg.rank) + ": not a rank of this job's " +
                                     std::to_string(count) + (cfg.role == wire::SERVER ? " servers" : " workers"));
    }
    t = NewZmqTransport(5000, &auth);
  }
  if (cfg.faults.any()) {
    LOG(WARNING) << "TALLY_TEST_FAULTS: injecting transport faults (" << cfg.faults.ToString() << ")";
    t = NewFaultyTransport(std::move(t), cfg.faults);
  }
  *out = NewReliableTransport(std::move(t), cfg.resend_ms);
  return Status::Ok();
}

std::string DescribeNode(const wire::Node& node) {
  const char* role = node.role() == wire::SCHEDULER ? "scheduler"
                     : node.role() == wire::SERVER  ? "server"
                                                    : "worker";
  std::string s = role;
  if (node.role() != wire::SCHEDULER) s += " " + std::to_string(node.rank());
  s += " (" + node.host() + ":" + std::to_string(node.port());
  if (node.pid() > 0) s += ", pid " + std::to_string(node.pid());
  return s + ")";
}

}  // namespace tally
