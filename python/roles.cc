// _tally.run_role(): a scheduler's or a server's whole life, for `import tally` in a
// process that tools/launch.py started as one (DMLC_ROLE), as MXNet's `import mxnet` does.
// _tally.RoleThreads: the same roles as threads of a worker's process, for tally.bench,
// whose Python figure is then measured in the shape of `tally bench ps`'s (one process).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "net/cluster.h"
#include "python/bindings.h"
#include "scheduler/scheduler.h"
#include "server/server.h"

namespace tally {
namespace python {
namespace {

Status RunRoleFromEnv(wire::Role* role) {
  ClusterConfig cfg;
  TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&cfg));
  *role = cfg.role;
  if (cfg.role == wire::WORKER) {
    return Status::InvalidArgument("DMLC_ROLE=worker: a worker creates a KVStore (tally.kv.create) instead");
  }
  std::unique_ptr<Transport> transport;
  TALLY_RETURN_IF_ERROR(NewJobTransport(cfg, &transport));
  // TALLY_ELASTIC=1 (tools/launch.py --elastic): a worker other than 0 may leave the job
  // (docs/faults.md); the learning rate kept, no membership.jsonl (no --model-prefix here).
  const char* env = std::getenv("TALLY_ELASTIC");
  SchedulerOptions scheduler;
  ElasticOptions server;
  scheduler.elastic = server.elastic = env != nullptr && std::string(env) == "1";
  if (cfg.role == wire::SCHEDULER) return RunScheduler(cfg, std::move(transport), nullptr, nullptr, scheduler);
  return RunServer(cfg, std::move(transport), ServerObserver(), server);
}

// Runs the role until the job ends; the process's exit code: 0 when the job ended well,
// 1 (with the reason on stderr, as `tally` prints it) otherwise.
int RunRole() {
  wire::Role role = wire::WORKER;
  Status s;
  {
    // The whole job: other Python threads (if any) go on meanwhile.
    py::gil_scoped_release nogil;
    s = RunRoleFromEnv(&role);
  }
  if (s.ok()) return 0;
  const char* name = role == wire::SCHEDULER ? "scheduler" : role == wire::SERVER ? "server" : "role";
  std::fprintf(stderr, "tally %s: %s\n", name, s.ToString().c_str());
  return 1;
}

// The scheduler and every server of the job the DMLC_* environment describes, as threads
// of this process, started by the constructor; a worker of this process then joins them.
class RoleThreads {
 public:
  RoleThreads() {
    ClusterConfig job;
    Status s = ClusterConfigFromEnv(&job);
    if (!s.ok()) ThrowStatus(s);
    ForgetJobSecret();
    statuses_.resize(1 + job.num_servers);
    for (int i = 0; i <= job.num_servers; ++i) {
      ClusterConfig cfg = job;
      cfg.role = i == 0 ? wire::SCHEDULER : wire::SERVER;
      cfg.rank = i == 0 ? 0 : i - 1;
      cfg.host = i == 0 ? job.scheduler_host : "127.0.0.1";
      cfg.port = 0;
      threads_.emplace_back([this, cfg, i] {
        std::unique_ptr<Transport> transport;
        Status st = NewJobTransport(cfg, &transport);
        if (st.ok()) st = i == 0 ? RunScheduler(cfg, std::move(transport)) : RunServer(cfg, std::move(transport));
        statuses_[i] = st;
      });
    }
  }
  ~RoleThreads() { JoinThreads(); }

  // Waits for the job's end (every worker finished); raises the first role's failure.
  void Join() {
    JoinThreads();
    for (const Status& s : statuses_) {
      if (!s.ok()) ThrowStatus(s);
    }
  }

 private:
  void JoinThreads() {
    py::gil_scoped_release nogil;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::vector<std::thread> threads_;
  std::vector<Status> statuses_;  // each written by its thread before it ends
};

}  // namespace

void ForgetJobSecret() {
  py::object environ = py::module_::import("os").attr("environ");
  for (const char* name : {"TALLY_JOB_SECRET", "TALLY_JOB_SECRET_FILE"}) environ.attr("pop")(name, py::none());
}

void BindRoles(py::module_& m) {
  m.def("run_role", &RunRole,
        "Runs this process's DMLC_ROLE (scheduler or server) until the job ends; returns the exit code");
  py::class_<RoleThreads>(m, "RoleThreads",
                          "The job's scheduler and servers (DMLC_* environment) as threads of this process "
                          "(tally.bench)")
      .def(py::init<>())
      .def("join", &RoleThreads::Join);
}

}  // namespace python
}  // namespace tally
