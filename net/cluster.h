// Cluster: a server's or worker's membership in a job: registration with the scheduler,
// the node table, barriers, heartbeats, and the end of the job (ps-lite's Postoffice).
//
//   ClusterConfig cfg;
//   TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&cfg));        // DMLC_* variables
//   std::unique_ptr<Cluster> cluster;
//   TALLY_RETURN_IF_ERROR(Cluster::Join(cfg, NewZmqTransport(), &cluster));
//   cluster->SetDataHandler([&](Message&& m) { ... });        // PUSH, PULL, RESPONSE, ...
//   TALLY_RETURN_IF_ERROR(cluster->Barrier(kGroupWorkers, timeout));
//   ...
//   cluster->Finish();        // a worker: done; a server: cluster->WaitForShutdown()
//
// Node ids: 0 is the scheduler, 1..M the servers, M+1..M+N the workers (NodeIds, node_ids.h).
// ids() turns ranks into ids and back; no caller does that arithmetic itself.
//
// Failure: the scheduler tells every node when a node stops answering (NODE_DEAD), and each
// node declares the scheduler dead when it has heard nothing from it for dead_timeout_ms.
// Either way the node logs which node died (role, rank, host, pid), every wait of this
// class and of the kvstore fails at once with that reason, and, if the process is still
// alive exit_grace_ms later (a long computation that never waits), a watchdog ends it with
// exit status 1. No wait here is without a timeout.
//
// Who may say what: the scheduler's notices (NODE_TABLE, BARRIER_DONE, SHUTDOWN, NODE_DEAD,
// SERVER_LOST, its heartbeats) are taken from the scheduler alone, answers from servers
// alone, and nothing from an id that is no node's; anything else is refused before it
// reaches the membership logic or the data handler (net/command_rules.h).
//
// Thread-safety: all methods may be called from any thread. The data handler runs on the
// receive thread, one message at a time; it must not block for long (heartbeats and
// failure notices wait behind it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/node_ids.h"
#include "net/transport.h"

namespace tally {

constexpr uint32_t kGroupScheduler = 1;
constexpr uint32_t kGroupServers = 2;
constexpr uint32_t kGroupWorkers = 4;
constexpr uint32_t kGroupAll = 7;

struct ClusterConfig {
  wire::Role role = wire::WORKER;
  std::string scheduler_host = "127.0.0.1";  // DMLC_PS_ROOT_URI
  int scheduler_port = 9091;                 // DMLC_PS_ROOT_PORT
  int num_workers = 1;                       // DMLC_NUM_WORKER
  int num_servers = 1;                       // DMLC_NUM_SERVER
  std::string host = "127.0.0.1";            // DMLC_NODE_HOST: where peers reach this node
  int port = 0;                              // TALLY_PORT: 0 picks a free port
  int rank = -1;                             // TALLY_RANK: the rank wanted; -1: any
  int heartbeat_interval_ms = 300;           // TALLY_HEARTBEAT_MS
  int dead_timeout_ms = 2000;                // TALLY_DEAD_TIMEOUT_MS
  int register_timeout_ms = 60000;           // TALLY_REGISTER_TIMEOUT_MS: the whole job must gather
  int exit_grace_ms = 1000;                  // after a failure, before the watchdog exits; < 0: never (tests)
  // The job's secret (32 raw bytes) from TALLY_JOB_SECRET or TALLY_JOB_SECRET_FILE: every
  // connection is authenticated and encrypted (docs/security.md). Empty: plain, which
  // ClusterConfigFromEnv allows only with TALLY_PLAIN=1.
  std::string job_secret;
  int resend_ms = 1000;  // TALLY_RESEND_MS: unacknowledged messages are sent again after this
  // TALLY_SERVER_REPLICAS: every server's slices are also held by the next R servers (its
  // chain, ReplicaChain); a server's death then ends nothing while one of each chain lives.
  int server_replicas = 0;
  // TALLY_SPARE_SERVERS: servers beyond num_servers that hold nothing until one takes a lost
  // server's place in its chains (docs/faults.md); ranks num_servers.., ids after the workers.
  int spare_servers = 0;
  FaultSpec faults;      // TALLY_TEST_FAULTS: test-only fault injection (docs/faults.md)
  // TALLY_JOIN=1: a worker that can join a running --elastic job (REGISTER says so:
  // docs/wire.md, "A worker joins"); the scheduler admits no other worker after the job
  // gathered. Such a worker may also start with the job, as any other.
  bool can_join = false;
};

// The transport a node of this job uses: ZeroMQ, with CURVE when cfg.job_secret is set,
// the test fault injector when cfg.faults asks for it, and exactly-once in-order delivery.
Status NewJobTransport(const ClusterConfig& cfg, std::unique_ptr<Transport>* out);

// Reads the DMLC_* and TALLY_* variables above. Fails naming the variable that is missing
// or malformed. DMLC_ROLE is one of scheduler, server, worker. Without a job secret it
// fails unless TALLY_PLAIN=1 says the network is trusted. TALLY_JOB_SECRET_FILE must name a
// regular file (not a symbolic link) of this process's user with no group or other
// permission. Once read, TALLY_JOB_SECRET and TALLY_JOB_SECRET_FILE are removed from the
// environment (no program the node starts inherits them) and the secret is kept for later
// calls in this process. Not safe while another thread reads the environment.
Status ClusterConfigFromEnv(ClusterConfig* cfg);

// "worker 1 (10.0.0.3:40123, pid 4242)"
std::string DescribeNode(const wire::Node& node);

class Cluster {
 public:
  // Binds, registers with the scheduler, waits for the node table and connects to every
  // node. Fails when the scheduler does not answer within register_timeout_ms.
  static Status Join(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
                     std::unique_ptr<Cluster>* out);
  ~Cluster();

  const wire::Node& me() const;
  int num_workers() const;
  int num_servers() const;
  int spare_servers() const;
  NodeIds ids() const { return NodeIds{num_servers(), num_workers(), spare_servers()}; }
  int ServerId(int server_rank) const { return ids().Server(server_rank); }
  int WorkerId(int worker_rank) const { return ids().Worker(worker_rank); }
  // A copy of node `id`'s entry, taken under the lock: a worker's entry is replaced when
  // a new process joins at its rank (--elastic), on the receiving thread.
  wire::Node node(int id) const;

  // Data messages (everything but membership) are handed to `handler` in arrival order on
  // a thread of their own (the receiving thread goes on taking acknowledgements and
  // heartbeats in meanwhile). Messages that arrive before a handler is set wait for it;
  // setting one waits for a message being handled.
  void SetDataHandler(std::function<void(Message&&)> handler);
  // Sends to node `id`; meta.sender_id is filled in.
  Status Send(int id, Message msg);
  // Data bytes sent to node id that it has not acknowledged yet (Transport::UnacknowledgedBytes).
  int64_t UnacknowledgedBytes(int id) const;
  // fn(id) is called on the receiving thread whenever acknowledgements from node id lower
  // UnacknowledgedBytes(id) (Transport::SetAckListener); returns the key that removes it.
  // RemoveAckListener returns once no call of it is running.
  int AddAckListener(std::function<void(int id)> fn);
  void RemoveAckListener(int key);

  // Waits until every node of `group` has called Barrier with the same group.
  Status Barrier(uint32_t group, int timeout_ms);
  // A worker's end: tells the scheduler (WORKER_DONE, with `steps`: the steps its run did,
  // its last step + 1 in the run's count; 0: not said) and waits for the job's SHUTDOWN.
  Status Finish(int timeout_ms, int64_t steps = 0);
  // A server's life: returns when the scheduler ends the job (Ok) or a node died.
  Status WaitForShutdown();

  // With --server-replicas, the scheduler reports a server lost whose slices live on
  // (SERVER_LOST): the job goes on, and the message reaches the data handler too, in order
  // with the data. Whether a server is still alive.
  bool ServerAlive(int server_rank) const;
  int server_replicas() const;

  // Messages this node refused because their sender may not send them (a worker's
  // SHUTDOWN, a RESPONSE from a worker, a negative sender id: net/command_rules.h). Each is
  // logged (the first 200, then one in 1000) and counted, never applied; the node logs the
  // counts by command at exit.
  int64_t refused() const;

  // Ok while the job is healthy; afterwards, why it is not. Waiters elsewhere (the
  // kvstore) poll this, or register with OnFailure to be woken.
  Status failure() const;

  // The scheduler's clock minus this node's trace clock (profile::NowUs), in µs, from the
  // heartbeat with the shortest round trip among the last 64 (*rtt_us). False before the
  // first answer.
  bool ClockOffset(int64_t* offset_us, int64_t* rtt_us) const;
  // 0: this node gathered with the job. > 0 (a worker with can_join): it joined the running
  // job after that membership epoch; the MEMBERSHIP of a later epoch naming it live says
  // from which step it pushes.
  int64_t joined_after_epoch() const;
  void OnFailure(std::function<void(const Status&)> callback);

 private:
  class Impl;
  explicit Cluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally
