#include <unistd.h>

#include <cstdlib>

#include "kvstore/cluster.h"

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
  if (cfg->dead_timeout_ms <= 2 * cfg->heartbeat_interval_ms) {
    return Status::InvalidArgument("TALLY_DEAD_TIMEOUT_MS must exceed twice TALLY_HEARTBEAT_MS");
  }
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
