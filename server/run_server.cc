// RunServer: a server node's life. Data messages are handled on the cluster's receive
// thread, in arrival order: handing them to a serving thread cost two context switches per
// request, a large share of a small key's round trip. Heartbeats go out from the cluster's
// own thread, so a long update only delays noticing a failure, by far less than the dead
// timeout (docs/wire.md).
#include <glog/logging.h>

#include "net/requests.h"
#include "ops/ops.h"
#include "server/server.h"

namespace tally {

Status RunServer(const ClusterConfig& cfg, std::unique_ptr<Transport> transport, const ServerObserver& observer,
                 const ElasticOptions& elastic) {
  CHECK(cfg.role == wire::SERVER) << "RunServer for role " << wire::Role_Name(cfg.role);
  // The update of each slice is spread over the worker pool, whose threads sleep between
  // batches (Updater::set_spread_over_pool), and no op runs an OpenMP team: a team's
  // threads spin after each region, and on a host shared with a GPU worker and another
  // server they took the cores the transport's threads needed.
  SetNumThreads(1);
  std::unique_ptr<Cluster> cluster;
  TALLY_RETURN_IF_ERROR(Cluster::Join(cfg, std::move(transport), &cluster));
  LOG(INFO) << "server: joined as " << DescribeNode(cluster->me()) << ", "
            << cluster->num_workers() << " workers, " << cluster->num_servers() << " servers";
  Cluster* c = cluster.get();
  if (observer.joined) observer.joined(*c);
  // Answers leave through the request layer, by priority (the request's) within a credit
  // per worker, so that the first layers' weights overtake a backlog of the others'
  // (net/requests.h). The server asks nothing itself: Post only.
  RequestOptions options;
  options.prefix = "server";
  Requests out(c, options, nullptr);
  out.Start();
  KVServer server(c->num_servers(), c->num_workers(), [&out, c](int id, Message m) {
    if (id == kSchedulerId) return c->Send(id, std::move(m));  // REPLICA_READY, MEMBERSHIP_REPORT
    return out.Post(id, std::move(m));
  }, c->spare_servers());
  server.SetReplication(c->me().rank(), c->server_replicas());
  if (elastic.elastic) server.SetElastic(elastic.keep_lr);
  if (observer.step) server.SetStepRecorder(observer.step, observer.step_begins);
  c->SetDataHandler([&server](Message&& m) { server.Handle(std::move(m)); });
  Status s = c->WaitForShutdown();
  // Waits for a message being handled: the server must not be destroyed under it.
  c->SetDataHandler([](Message&&) {});
  server.FlushSteps();
  if (server.NumRefused() > 0) {
    LOG(WARNING) << "server: refused " << server.NumRefused() << " requests (each answered with its error and logged)";
  }
  if (observer.ending) observer.ending(*c);
  if (s.ok()) {
    LOG(INFO) << "server: the job has ended";
  } else {
    LOG(ERROR) << "server: " << s;
  }
  return s;
}

}  // namespace tally
