#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

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

// The longest secret file read: 64 hex digits and a line end, with room for a CR or blanks.
constexpr size_t kMaxSecretFileBytes = 256;

// Reads the file named by TALLY_JOB_SECRET_FILE, refusing one that another user could have
// placed or could read. The checks are made on the open file (fstat), not on its name, so
// that nothing can swap the file between check and read; O_NOFOLLOW refuses a symbolic link,
// which anyone able to write its directory could point at a file of their choosing, and
// O_NONBLOCK keeps a FIFO from stalling the open until fstat refuses it.
Status ReadSecretFile(const std::string& path, std::string* text) {
  const std::string what = "TALLY_JOB_SECRET_FILE " + path;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      return Status::InvalidArgument(what + " is a symbolic link; name the secret's file itself "
                                     "(a link is refused: it may point anywhere)");
    }
    if (err == ENOENT) return Status::NotFound(what + ": no such file");
    return Status::IoError(what + ": cannot open: " + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return Status::IoError(what + ": fstat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(what + " is not a regular file");
  if (st.st_uid != geteuid()) {
    return Status::InvalidArgument(what + " is owned by uid " + std::to_string(st.st_uid) + ", not by this " +
                                   "process's user (uid " + std::to_string(geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument(what + " has mode " + mode +
                                   ": its group or other users may use it (chmod 600 it)");
  }
  char buf[kMaxSecretFileBytes + 1];
  size_t got = 0;
  while (got < sizeof(buf)) {
    const ssize_t n = read(fd, buf + got, sizeof(buf) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(what + ": read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxSecretFileBytes) {
    return Status::InvalidArgument(what + " is longer than " + std::to_string(kMaxSecretFileBytes) +
                                   " bytes; it must hold 64 hex digits (32 random bytes)");
  }
  text->assign(buf, got);
  return Status::Ok();
}

// The secret this process has taken out of its environment, for its later readers: a
// Python worker that runs the scheduler and server as threads (tally.bench) reads the job
// three times, and tally.kv may join more than once.
std::mutex taken_mu;
std::string* taken_secret = nullptr;  // GUARDED_BY(taken_mu); set once, never freed

// Removes the secret's variables from the environment once read, so that no program this
// node starts inherits them, and remembers the secret for later readers in this process.
// Like every setenv, unsetenv is not safe while another thread reads the environment; nodes
// read their configuration before they start threads.
void TakeSecret(const std::string& secret) {
  unsetenv("TALLY_JOB_SECRET");
  unsetenv("TALLY_JOB_SECRET_FILE");
  std::lock_guard<std::mutex> lock(taken_mu);
  if (taken_secret == nullptr) taken_secret = new std::string;
  *taken_secret = secret;
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
  if (!inline_secret.empty()) {
    TALLY_RETURN_IF_ERROR(ParseSecret("TALLY_JOB_SECRET", inline_secret, &cfg->job_secret));
    TakeSecret(cfg->job_secret);
    return Status::Ok();
  }
  if (!file.empty()) {
    std::string text;
    TALLY_RETURN_IF_ERROR(ReadSecretFile(file, &text));
    TALLY_RETURN_IF_ERROR(ParseSecret("TALLY_JOB_SECRET_FILE " + file, text, &cfg->job_secret));
    TakeSecret(cfg->job_secret);
    return Status::Ok();
  }
  if (want_plain) return Status::Ok();
  {
    std::lock_guard<std::mutex> lock(taken_mu);
    if (taken_secret != nullptr) {
      cfg->job_secret = *taken_secret;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(
      "no job secret: start the job with tools/launch.py, which makes one, or set TALLY_JOB_SECRET_FILE "
      "(a file of mode 600 holding 64 hex digits, the same in every process of the job) or TALLY_JOB_SECRET; "
      "TALLY_PLAIN=1 runs without authentication on a trusted network");
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
  // TALLY_JOIN=1: a worker started into a running --elastic job (docs/faults.md, "A worker
  // joins"). Only workers join; a scheduler or server that inherits it ignores it.
  int join = 0;
  TALLY_RETURN_IF_ERROR(ReadInt("TALLY_JOIN", 0, 1, false, &join));
  cfg->can_join = join == 1 && cfg->role == wire::WORKER;
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
