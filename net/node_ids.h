// NodeIds: how a job numbers its nodes, written down once so that no caller does the
// arithmetic itself.
//
//   NodeIds ids{/*num_servers=*/2, /*num_workers=*/4};
//   cluster->Send(ids.Server(1), msg);                 // server 1 is node 2
//   int rank = ids.WorkerRank(msg.meta.sender_id());   // node 3 is worker 0
//   if (!ids.IsWorker(msg.meta.sender_id())) ...       // refuse a stranger
//
// Ids: 0 the scheduler, 1..M the servers (server rank r is node 1 + r), M+1..M+N the
// workers (worker rank r is node 1 + M + r), then the K spare servers (--spare-servers:
// server rank M + k is node 1 + M + N + k), so that a job's ids without spares are those of
// the same job with them. The scheduler hands them out in this order (scheduler.cc), and
// the wire's sender_id and every node table use them (docs/wire.md). A plain value;
// thread-safe as any const object.
#pragma once

#include <vector>

namespace tally {

constexpr int kSchedulerId = 0;

struct NodeIds {
  int num_servers = 0;  // the servers that hold slices from the start (M)
  int num_workers = 0;
  int spare_servers = 0;  // servers held in reserve (K), ranks M..M+K-1

  int all_servers() const { return num_servers + spare_servers; }
  int Server(int server_rank) const {
    return server_rank < num_servers ? 1 + server_rank : 1 + num_workers + server_rank;
  }
  int Worker(int worker_rank) const { return 1 + num_servers + worker_rank; }
  // REQUIRES: IsServer(id), IsWorker(id) respectively.
  int ServerRank(int id) const { return id <= num_servers ? id - 1 : id - 1 - num_workers; }
  int WorkerRank(int id) const { return id - Worker(0); }
  bool IsServer(int id) const {
    return (id >= Server(0) && id <= num_servers) || (id >= Worker(num_workers) && id < size());
  }
  bool IsWorker(int id) const { return id >= Worker(0) && id < Worker(num_workers); }
  bool IsSpare(int server_rank) const { return server_rank >= num_servers; }
  int size() const { return 1 + num_servers + num_workers + spare_servers; }  // the scheduler too
};

// The servers holding server `rank`'s slices with `replicas` replicas (--server-replicas):
// rank, rank + 1, ..., rank + replicas, modulo num_servers; the first live one serves them
// (docs/faults.md).
inline std::vector<int> ReplicaChain(int rank, int replicas, int num_servers) {
  std::vector<int> chain;
  for (int i = 0; i <= replicas && i < num_servers; ++i) chain.push_back((rank + i) % num_servers);
  return chain;
}

}  // namespace tally
