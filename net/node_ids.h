// NodeIds: how a job numbers its nodes, written down once so that no caller does the
// arithmetic itself.
//
//   NodeIds ids{/*num_servers=*/2, /*num_workers=*/4};
//   cluster->Send(ids.Server(1), msg);                 // server 1 is node 2
//   int rank = ids.WorkerRank(msg.meta.sender_id());   // node 3 is worker 0
//   if (!ids.IsWorker(msg.meta.sender_id())) ...       // refuse a stranger
//
// Ids: 0 the scheduler, 1..M the servers (server rank r is node 1 + r), M+1..M+N the
// workers (worker rank r is node 1 + M + r). The scheduler hands them out in this order
// (scheduler.cc), and the wire's sender_id and every node table use them (docs/wire.md).
// A plain value; thread-safe as any const object.
#pragma once

#include <vector>

namespace tally {

constexpr int kSchedulerId = 0;

struct NodeIds {
  int num_servers = 0;
  int num_workers = 0;

  int Server(int server_rank) const { return 1 + server_rank; }
  int Worker(int worker_rank) const { return 1 + num_servers + worker_rank; }
  // REQUIRES: IsServer(id), IsWorker(id) respectively.
  int ServerRank(int id) const { return id - 1; }
  int WorkerRank(int id) const { return id - Worker(0); }
  bool IsServer(int id) const { return id >= Server(0) && id < Server(num_servers); }
  bool IsWorker(int id) const { return id >= Worker(0) && id < Worker(num_workers); }
  int size() const { return 1 + num_servers + num_workers; }  // the scheduler too
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
