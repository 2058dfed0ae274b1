// _tally.run_role(): a scheduler's or a server's whole life, for `import tally` in a
// process that tools/launch.py started as one (DMLC_ROLE), as MXNet's `import mxnet` does.
#include <cstdio>

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
  if (cfg.role == wire::SCHEDULER) return RunScheduler(cfg, std::move(transport));
  return RunServer(cfg, std::move(transport));
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

}  // namespace

void BindRoles(py::module_& m) {
  m.def("run_role", &RunRole,
        "Runs this process's DMLC_ROLE (scheduler or server) until the job ends; returns the exit code");
}

}  // namespace python
}  // namespace tally
