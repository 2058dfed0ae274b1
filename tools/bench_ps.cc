// `tally bench ps`: push, pull and pushpull through a real job (scheduler, servers and
// workers as threads of this process, talking ZeroMQ over loopback TCP), for payloads from
// 4 KB to 100 MB and for ResNet-50's 161 arrays in fp32 and fp16, against the limits
// measured in the same run: one plain TCP stream's bandwidth and a plain TCP round trip.
// By default the job runs twice, plain and then secure (authenticated and encrypted, as
// tools/launch.py starts jobs), and each secure figure is also given against plain's.
//
// Bandwidth is bytes moved per second: a push or a pull of S bytes moves S, a pushpull 2S
// (there and back, one after the other), the same bytes one TCP stream would carry.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <tuple>

#include <gflags/gflags.h>

#include "base/host_blocks.h"
#include "kvstore/kvstore.h"
#include "models/network.h"
#include "net/cluster.h"
#include "net/secure_session.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tools/bench.h"
#include "tools/command.h"

DECLARE_bool(json);
DEFINE_int32(workers, 1, "workers of the benchmark job");
DEFINE_int32(servers, 1, "servers of the benchmark job");
DEFINE_int32(iters, 20, "timed repetitions of each operation (the median is reported)");
DEFINE_string(sizes, "4K,64K,1M,16M,100M", "payload sizes of the single-array cases");
DEFINE_int32(server_replicas, 0,
             "also run the job with each server's slices on this many more servers (--servers must "
             "exceed it) and give its ResNet-50 figures against the job without replicas");
DEFINE_string(security, "both",
              "secure: the job authenticated and encrypted, as tools/launch.py runs it; plain: "
              "without (TALLY_PLAIN=1); both: each in turn, secure compared with plain");

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

struct Timings {
  std::vector<double> push, pull, pushpull;
};

// A job secret, as tools/launch.py makes one.
void RandomBytes(std::string* out) {
  size_t got = 0;
  while (got < out->size()) {
    ssize_t n = getrandom(out->data() + got, out->size() - got, 0);
    CHECK_GT(n, 0) << "getrandom";
    got += static_cast<size_t>(n);
  }
}

// User and system time of every thread of this process, in seconds.
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// CPU time of the calling thread, in seconds.
double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec / 1e9;
}

// Page faults (minor and major) of every thread of this process so far.
double ProcessPageFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt + u.ru_majflt);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

Status ParseSizes(const std::string& text, std::vector<int64_t>* bytes) {
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    double v = std::strtod(part.c_str(), &end);
    std::string unit = end;
    int64_t mult = unit == "K" ? 1024 : unit == "M" ? 1 << 20 : unit == "" ? 1 : 0;
    if (v <= 0 || mult == 0) return Status::InvalidArgument("--sizes: bad size '" + part + "' (such as 4K, 16M)");
    bytes->push_back(static_cast<int64_t>(v * mult) / 4 * 4);
  }
  return Status::Ok();
}

int g_replicas = 0;  // the --server-replicas of the job being run (RunJob)

ClusterConfig JobConfig(wire::Role role, int rank, int port, const std::string& secret) {
  ClusterConfig c;
  c.server_replicas = g_replicas;
  c.role = role;
  c.rank = rank;
  c.scheduler_port = port;
  c.num_workers = FLAGS_workers;
  c.num_servers = FLAGS_servers;
  c.job_secret = secret;
  return c;
}

// One worker's share of the benchmark; every worker runs the same operations in step, and
// worker 0 records the times.
struct WorkerRun {
  std::vector<int64_t> sizes;          // bytes of the single-array keys
  std::vector<int64_t> resnet_sizes;   // elements of ResNet-50's arrays
  std::vector<Timings> single;         // per size
  std::vector<double> resnet_f32, resnet_f16;
  double resnet_f32_cpu_s = 0;  // this process's CPU time (every role's threads) in the fp32 set's timed runs
  double resnet_faults[2] = {0, 0};  // this process's page faults per step of each set, warm-up excluded
  double resnet_fresh_blocks = 0;    // host blocks allocated anew (not reused) per step, fp32 set
  Status status;

  void Run(const ClusterConfig& cfg) {
    status = RunImpl(cfg);
  }

  Status RunImpl(const ClusterConfig& cfg) {
    std::unique_ptr<Cluster> cluster;
    std::unique_ptr<Transport> transport;
    TALLY_RETURN_IF_ERROR(NewJobTransport(cfg, &transport));
    TALLY_RETURN_IF_ERROR(Cluster::Join(cfg, std::move(transport), &cluster));
    KVStoreSpec spec;
    spec.type = KVStoreType::kDistSync;
    spec.cluster = cluster.get();
    std::unique_ptr<KVStore> kv;
    TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
    // Keys: the single arrays, then ResNet-50 in fp32, then ResNet-50 in fp16.
    std::vector<int> keys;
    std::vector<Tensor> grads, weights;
    for (int64_t b : sizes) {
      grads.push_back(Tensor::Zeros({b / 4}, DType::kF32));
      weights.push_back(Tensor::Zeros({b / 4}, DType::kF32));
    }
    for (DType t : {DType::kF32, DType::kF16}) {
      for (int64_t n : resnet_sizes) {
        grads.push_back(Tensor::Zeros({n}, t));
        weights.push_back(Tensor::Zeros({n}, t));
      }
    }
    for (size_t i = 0; i < grads.size(); ++i) keys.push_back(static_cast<int>(i));
    TALLY_RETURN_IF_ERROR(kv->Init(keys, weights));

    double faults0 = 0;  // at the end of the warm-up of the last timed operation
    long long fresh0 = 0;
    auto timed = [&](auto op, std::vector<double>* out) -> Status {
      for (int i = 0; i < FLAGS_iters + 2; ++i) {
        if (i == 2) {
          faults0 = ProcessPageFaults();
          fresh0 = HostBlockCounters().fresh;
        }
        auto t0 = Clock::now();
        TALLY_RETURN_IF_ERROR(op());
        TALLY_RETURN_IF_ERROR(kv->WaitAll());
        if (i >= 2) out->push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      return Status::Ok();
    };
    single.resize(sizes.size());
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int k = static_cast<int>(s);
      TALLY_RETURN_IF_ERROR(timed([&] { return kv->Push(k, {grads[s]}); }, &single[s].push));
      TALLY_RETURN_IF_ERROR(timed([&] { return kv->Pull(k, {weights[s]}); }, &single[s].pull));
      TALLY_RETURN_IF_ERROR(timed([&] { return kv->PushPull(k, {grads[s]}, {weights[s]}); }, &single[s].pushpull));
    }
    for (int set = 0; set < 2; ++set) {
      const size_t first = sizes.size() + set * resnet_sizes.size();
      auto all = [&]() -> Status {
        for (size_t i = first; i < first + resnet_sizes.size(); ++i) {
          const int k = static_cast<int>(i);
          TALLY_RETURN_IF_ERROR(kv->PushPull(k, {grads[i]}, {weights[i]}, -k));
        }
        return Status::Ok();
      };
      const double cpu0 = ProcessCpuSeconds();
      TALLY_RETURN_IF_ERROR(timed(all, set == 0 ? &resnet_f32 : &resnet_f16));
      if (set == 0) resnet_f32_cpu_s = ProcessCpuSeconds() - cpu0;
      resnet_faults[set] = (ProcessPageFaults() - faults0) / FLAGS_iters;
      if (set == 0) resnet_fresh_blocks = static_cast<double>(HostBlockCounters().fresh - fresh0) / FLAGS_iters;
    }
    return cluster->Finish(60000);
  }
};

std::string SizeName(int64_t b) {
  return b >= (1 << 20) ? std::to_string(b >> 20) + "MB" : std::to_string(b >> 10) + "KB";
}

// One job over loopback in `mode` (plain or secure): a scheduler, --servers servers and
// --workers workers as threads, each worker running `proto`; *out: worker 0's figures.
Status RunJob(const std::string& mode, const WorkerRun& proto, WorkerRun* out, int replicas = 0) {
  g_replicas = replicas;
  std::string secret;
  if (mode == "secure") secret = std::string(32, '\0'), RandomBytes(&secret);
  const int port = FreeTcpPort();
  Status sched_status;
  std::vector<Status> server_status(FLAGS_servers);
  auto role = [&](wire::Role r, int rank, auto run) {
    ClusterConfig c = JobConfig(r, rank, port, secret);
    std::unique_ptr<Transport> t;
    Status st = NewJobTransport(c, &t);
    return st.ok() ? run(c, std::move(t)) : st;
  };
  std::thread scheduler([&] {
    sched_status = role(wire::SCHEDULER, 0, [](const ClusterConfig& c, std::unique_ptr<Transport> t) {
      return RunScheduler(c, std::move(t));
    });
  });
  std::vector<std::thread> servers;
  for (int i = 0; i < FLAGS_servers; ++i) {
    servers.emplace_back([&, i] {
      server_status[i] = role(wire::SERVER, i, [](const ClusterConfig& c, std::unique_ptr<Transport> t) {
        return RunServer(c, std::move(t));
      });
    });
  }
  std::vector<WorkerRun> runs(FLAGS_workers, proto);
  std::vector<std::thread> workers;
  if (!FLAGS_json) {
    std::fprintf(stderr, "running the job (%s): %d workers, %d servers, %d replicas...\n", mode.c_str(),
                 FLAGS_workers, FLAGS_servers, replicas);
  }
  for (int i = 0; i < FLAGS_workers; ++i) {
    workers.emplace_back([&, i] { runs[i].Run(JobConfig(wire::WORKER, i, port, secret)); });
  }
  for (auto& t : workers) t.join();
  for (auto& t : servers) t.join();
  scheduler.join();
  for (const WorkerRun& r : runs) TALLY_RETURN_IF_ERROR(r.status);
  *out = runs[0];
  return Status::Ok();
}

// The rows of the report: each mode's figures against the TCP limits measured in the same
// run; with both modes, secure's also against plain's.
std::vector<BenchRow> PsRows(const std::vector<std::string>& modes, const std::map<std::string, WorkerRun>& result,
                             int64_t resnet_elements, double tcp_gbps, double tcp_rtt_us) {
  const std::string tcp = "tcp-loopback-1-stream";
  std::vector<BenchRow> rows;
  auto add = [&](const std::string& name, double value, const std::string& unit, double peer,
                 const std::string& peer_name, bool lower_is_better, const std::string& note, bool limit) {
    BenchRow row;
    row.bench = "ps";
    row.name = name;
    row.value = value;
    row.unit = unit;
    row.peer = peer;
    row.peer_name = peer_name;
    row.lower_is_better = lower_is_better;
    row.note = note;
    row.peer_is_limit = limit;
    rows.push_back(row);
  };
  for (const std::string& mode : modes) {
    const WorkerRun& r = result.at(mode);
    const WorkerRun* plain = modes.size() == 2 && mode == "secure" ? &result.at("plain") : nullptr;
    const std::string shape = mode + "-" + std::to_string(FLAGS_workers) + "w" + std::to_string(FLAGS_servers) + "s";
    auto bandwidth = [&](const std::string& name, double bytes, const std::vector<double>& t,
                         const std::vector<double>* plain_t, const std::string& note) {
      add(name, bytes / Median(t) / 1e9, "GB/s", tcp_gbps, tcp, false, note, true);
      if (plain_t != nullptr) {
        add(name + "-vs-plain", bytes / Median(t) / 1e9, "GB/s", bytes / Median(*plain_t) / 1e9, "same job, plain",
            false, "the cost of authentication and encryption", false);
      }
    };
    for (size_t i = 0; i < r.sizes.size(); ++i) {
      const double b = static_cast<double>(r.sizes[i]);
      const std::string base = shape + "-" + SizeName(r.sizes[i]);
      bandwidth(base + "-push", b, r.single[i].push, nullptr, "");
      bandwidth(base + "-pull", b, r.single[i].pull, nullptr, "");
      bandwidth(base + "-pushpull", 2 * b, r.single[i].pushpull, plain ? &plain->single[i].pushpull : nullptr, "");
      if (r.sizes[i] == 4096) {
        add(base + "-pushpull-latency", Median(r.single[i].pushpull) * 1e6, "us", tcp_rtt_us,
            "tcp-loopback-4KB-round-trip", true, "goal: within 1.5x the TCP round trip", true);
        if (plain) {
          add(base + "-pushpull-latency-vs-plain", Median(r.single[i].pushpull) * 1e6, "us",
              Median(plain->single[i].pushpull) * 1e6, "same job, plain", true, "", false);
        }
      }
    }
    const double f32 = Median(r.resnet_f32), f16 = Median(r.resnet_f16);
    bandwidth(shape + "-resnet50-pushpull-fp32", 2.0 * 4 * resnet_elements, r.resnet_f32,
              plain ? &plain->resnet_f32 : nullptr, "161 arrays, " + std::to_string(resnet_elements) + " values");
    bandwidth(shape + "-resnet50-pushpull-fp16", 2.0 * 2 * resnet_elements, r.resnet_f16,
              plain ? &plain->resnet_f16 : nullptr, "");
    // Every worker moves the same bytes in step (dist_sync), so the job's aggregate is
    // the workers times worker 0's; the CPU time covers every role and the two warm-up runs.
    const double moved = 2.0 * 4 * resnet_elements * FLAGS_workers;
    if (FLAGS_workers > 1) {
      add(shape + "-resnet50-pushpull-fp32-aggregate", moved / f32 / 1e9, "GB/s", tcp_gbps, tcp, false,
          std::to_string(FLAGS_workers) + " workers' bytes", true);
    }
    const double cpu_per_gb = r.resnet_f32_cpu_s / (moved * (FLAGS_iters + 2) / 1e9);
    add(shape + "-resnet50-cpu-per-GB", cpu_per_gb, "core-s", plain ? plain->resnet_f32_cpu_s /
        (moved * (FLAGS_iters + 2) / 1e9) : -1, plain ? "same job, plain" : "", true,
        plain ? "core-seconds of every role per GB moved; crypto's cost " +
                    std::to_string((cpu_per_gb - plain->resnet_f32_cpu_s / (moved * (FLAGS_iters + 2) / 1e9)) * 1e3)
                        .substr(0, 6) + " core-ms/GB"
              : "core-seconds of every role per GB moved",
        false);
    add(shape + "-resnet50-page-faults-per-step", r.resnet_faults[0], "faults", 200, "goal", true,
        "every role's, fp32 pushpull (fp16: " + std::to_string(static_cast<long>(r.resnet_faults[1])) +
            "); host blocks allocated anew per step: " + std::to_string(r.resnet_fresh_blocks).substr(0, 5), true);
    add(shape + "-resnet50-sync-time-fp16/fp32", f16 / f32, "x", -1, "", true,
        "fp32 " + std::to_string(f32 * 1e3).substr(0, 6) + " ms, fp16 " + std::to_string(f16 * 1e3).substr(0, 6) +
            " ms; goal <= 0.55",
        true);
  }
  return rows;
}

// --server-replicas: the ResNet-50 sets with replicas against the same job without (every
// replica receives each push: what replication costs the workers' pushes and the servers).
std::vector<BenchRow> ReplicaRows(const std::string& mode, const WorkerRun& plain, const WorkerRun& replicated,
                                  int64_t resnet_elements) {
  std::vector<BenchRow> rows;
  const std::string tag = "R" + std::to_string(FLAGS_server_replicas);
  for (auto [dtype, bytes, with, without] :
       {std::make_tuple("fp32", 4, &replicated.resnet_f32, &plain.resnet_f32),
        std::make_tuple("fp16", 2, &replicated.resnet_f16, &plain.resnet_f16)}) {
    BenchRow row;
    row.bench = "ps";
    row.name = std::to_string(FLAGS_workers) + "w" + std::to_string(FLAGS_servers) + "s-resnet50-pushpull-" + dtype +
               "-" + tag + "-vs-R0";
    const double moved = 2.0 * bytes * static_cast<double>(resnet_elements);
    row.value = moved / Median(*with) / 1e9;
    row.unit = "GB/s";
    row.peer = moved / Median(*without) / 1e9;
    row.peer_name = "same job without replicas (" + mode + ")";
    row.note = "--server-replicas " + std::to_string(FLAGS_server_replicas) + ": goal >= 0.85";
    rows.push_back(row);
  }
  return rows;
}

// The secure transport's own costs, measured here: AES-256-GCM on one core (the records of
// a 64 MB frame sealed on this thread), and sealing then opening one 4 KB message (the
// per-message work a round trip does four times: request, answer and their acknowledgements).
std::vector<BenchRow> CryptoRows(double tcp_gbps, double* seal_open_core_s_per_gb) {
  JobAuth server_auth{std::string(32, 'k'), "server 0", {1, 1}}, worker_auth{std::string(32, 'k'), "worker 0", {1, 1}};
  ClientSession client(&worker_auth, "server 0");
  Responder responder(&server_auth);
  const std::string hello = client.Hello();
  std::string why;
  const std::string welcome = responder.OnHello(1, hello.data(), hello.size(), 1, &why);
  CHECK(client.OnReply(welcome.data(), welcome.size()).ok());
  std::shared_ptr<ServerSession> server;
  CHECK(responder.OnConfirm(1, client.confirm().data(), client.confirm().size(), 1, &server).ok());
  auto seal_open = [&](const std::vector<Tensor>& data, int reps) {
    std::vector<size_t> sizes;
    CHECK(client.SealedSizes("meta", data, &sizes).ok());
    std::vector<std::string> frames;
    for (size_t n : sizes) frames.emplace_back(n, '\0');
    std::vector<uint8_t*> outs;
    for (std::string& f : frames) outs.push_back(reinterpret_cast<uint8_t*>(f.data()));
    // This thread's CPU time, not the wall clock: a limit that a busy neighbour cannot move.
    double seal_s = 0;
    const double t0 = ThreadCpuSeconds();
    for (int i = 0; i < reps; ++i) {
      const double s0 = ThreadCpuSeconds();
      client.Seal("meta", data, outs);
      seal_s += ThreadCpuSeconds() - s0;
      std::vector<WireFrame> wire;
      for (std::string& f : frames) wire.push_back({f.data(), f.size(), nullptr});
      CHECK(server->Open(&wire).ok());
    }
    return std::make_pair(seal_s / reps, (ThreadCpuSeconds() - t0) / reps);
  };
  const double small_us = seal_open({Tensor::Zeros({1024}, DType::kF32)}, 20000).second * 1e6;
  // One core: records of at most 256 KB, below the size at which they are spread.
  const Tensor record = Tensor::Zeros({(256 << 10) / 4}, DType::kF32);
  const auto [record_seal_s, record_both_s] = seal_open({record}, 256);
  const double record_s = record_seal_s;
  *seal_open_core_s_per_gb = record_both_s / (record.nbytes() / 1e9);
  std::vector<BenchRow> rows(2);
  rows[0].bench = rows[1].bench = "ps";
  rows[0].name = "aes-256-gcm-seal-1-core";
  rows[0].value = record.nbytes() / record_s / 1e9;
  rows[0].unit = "GB/s";
  rows[0].peer = tcp_gbps;
  rows[0].peer_name = "tcp-loopback-1-stream";
  rows[0].note = "256 KB records on one thread; each byte moved is sealed once and opened once";
  rows[0].peer_is_limit = true;
  rows[1].name = "secure-4KB-message-seal-and-open";
  rows[1].value = small_us;
  rows[1].unit = "us";
  rows[1].peer = -1;
  rows[1].lower_is_better = true;
  rows[1].note = "a 4 KB data frame and its Meta, one thread";
  return rows;
}

// One core's memcpy of a 256 MB buffer already faulted in, in GB/s of this thread's CPU
// time: the least a copy of every byte moved costs.
double MemcpyGBps() {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const double t0 = ThreadCpuSeconds();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, n / (ThreadCpuSeconds() - t0) / 1e9);
    a[i] = b[n - 1 - i];  // the copies depend on each other: none can be left out
  }
  return best;
}

// The CPU the ResNet-50 set cost every role, against the limits measured here: plain
// against one core's memcpy of each byte moved, and what security added against sealing
// and opening each byte once on one core (goal: at most 1.2x that).
std::vector<BenchRow> CpuLimitRows(const std::map<std::string, WorkerRun>& result, int64_t resnet_elements,
                                   double seal_open_core_s_per_gb) {
  const double moved_gb = 2.0 * 4 * resnet_elements * FLAGS_workers * (FLAGS_iters + 2) / 1e9;
  std::vector<BenchRow> rows;
  auto row = [&](const std::string& name, double value, double limit, const std::string& limit_name,
                 const std::string& note) {
    rows.push_back(BenchRow{"ps", name, value, "core-s/GB", limit, limit_name, note, /*lower_is_better=*/true,
                            /*peer_is_limit=*/true});
  };
  const double memcpy_core_s = 1 / MemcpyGBps();
  auto plain = result.find("plain"), secure = result.find("secure");
  if (plain != result.end()) {
    row("plain-resnet50-cpu-per-GB-vs-memcpy", plain->second.resnet_f32_cpu_s / moved_gb, memcpy_core_s,
        "memcpy-1-core", "every role's CPU per GB moved, in memcpys of each byte (ratio)");
  }
  if (plain != result.end() && secure != result.end()) {
    row("secure-minus-plain-cpu-per-GB", (secure->second.resnet_f32_cpu_s - plain->second.resnet_f32_cpu_s) / moved_gb,
        seal_open_core_s_per_gb, "aes-256-gcm-seal+open-1-core", "what security adds; goal <= 1.2x the limit");
  }
  return rows;
}

}  // namespace

int BenchPs(int argc, char** argv) {
  ParseFlags("tally bench ps [--json] [--workers=1] [--servers=1] [--iters=20] [--sizes=4K,...,100M] [--security=both|secure|plain] [--server-replicas=R]", &argc, &argv, {__FILE__});
  if (FLAGS_workers < 1 || FLAGS_servers < 1 || FLAGS_iters < 1) {
    std::fprintf(stderr, "tally bench ps: --workers, --servers and --iters must be positive\n");
    return 2;
  }
  if (FLAGS_server_replicas < 0 || FLAGS_server_replicas >= FLAGS_servers) {
    std::fprintf(stderr, "tally bench ps: --server-replicas %d: from 0 to --servers - 1 (%d)\n",
                 FLAGS_server_replicas, FLAGS_servers - 1);
    return 2;
  }
  WorkerRun proto;
  Status s = ParseSizes(FLAGS_sizes, &proto.sizes);
  std::unique_ptr<Network> net;
  if (s.ok()) s = CreateNetwork(ModelConfig(), &net);
  if (!s.ok()) {
    std::fprintf(stderr, "tally bench ps: %s\n", s.ToString().c_str());
    return 2;
  }
  int64_t resnet_elements = 0;
  for (const Parameter* p : net->Parameters()) {
    if (!p->trainable) continue;
    proto.resnet_sizes.push_back(p->value.numel());
    resnet_elements += p->value.numel();
  }
  net.reset();

  if (!FLAGS_json) std::fprintf(stderr, "measuring one loopback TCP stream and round trip...\n");
  const double tcp_gbps = TcpStreamGBps(size_t{4} << 30);
  const double tcp_rtt_us = TcpRoundTripMedianUs(4096, 2000);

  std::vector<std::string> modes;
  if (FLAGS_security == "both") modes = {"plain", "secure"};
  else if (FLAGS_security == "plain" || FLAGS_security == "secure") modes = {FLAGS_security};
  else {
    std::fprintf(stderr, "tally bench ps: --security=%s (expected secure, plain or both)\n", FLAGS_security.c_str());
    return 2;
  }
  std::map<std::string, WorkerRun> result;
  for (const std::string& mode : modes) {
    s = RunJob(mode, proto, &result[mode]);
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench ps (%s): %s\n", mode.c_str(), s.ToString().c_str());
      return 1;
    }
  }

  std::vector<BenchRow> rows = PsRows(modes, result, resnet_elements, tcp_gbps, tcp_rtt_us);
  if (FLAGS_server_replicas > 0) {
    const std::string mode = modes.back();
    WorkerRun replicated;
    s = RunJob(mode, proto, &replicated, FLAGS_server_replicas);
    if (!s.ok()) {
      std::fprintf(stderr, "tally bench ps (%s, replicas): %s\n", mode.c_str(), s.ToString().c_str());
      return 1;
    }
    for (BenchRow& row : ReplicaRows(mode, result.at(mode), replicated, resnet_elements)) rows.push_back(row);
  }
  double seal_open_core_s_per_gb = -1;
  if (std::find(modes.begin(), modes.end(), "secure") != modes.end()) {
    for (BenchRow& row : CryptoRows(tcp_gbps, &seal_open_core_s_per_gb)) rows.push_back(row);
  }
  for (BenchRow& row : CpuLimitRows(result, resnet_elements, seal_open_core_s_per_gb)) rows.push_back(row);
  Report(rows, FLAGS_json);
  return 0;
}

}  // namespace tally
