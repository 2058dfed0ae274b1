// LocalJob: a parameter-server job inside one test process: the scheduler and the servers
// as threads, and one thread per worker running the test's function with its own Cluster,
// over the in-process transport or ZeroMQ on loopback. Header-only, for tests.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "net/cluster.h"
#include "scheduler/scheduler.h"
#include "server/server.h"

namespace tally {

inline ClusterConfig TestClusterConfig(wire::Role role, int port, int workers, int servers) {
  ClusterConfig c;
  c.role = role;
  c.scheduler_port = port;
  c.num_workers = workers;
  c.num_servers = servers;
  c.heartbeat_interval_ms = 100;
  c.dead_timeout_ms = 3000;
  c.register_timeout_ms = 20000;
  c.exit_grace_ms = -1;  // a test process must survive the failures it provokes
  return c;
}

// A scheduler port. ZeroMQ: one the system has free right now (bound to port 0 and
// released), so that tests running side by side, and the nodes' own ports, never collide.
// In-process: any number not used before in this process.
inline int TestPort(bool zmq) {
  static std::atomic<int> next_inproc{45000};
  if (!zmq) return next_inproc++;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "no free TCP port";
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// A job: the scheduler and the servers start at construction; Run runs one function per
// worker, each on its own thread with its own Cluster, and waits for the job to end,
// expecting every role to end well.
class LocalJob {
 public:
  LocalJob(bool zmq, int workers, int servers) : zmq_(zmq), workers_(workers), servers_(servers), port_(TestPort(zmq)) {
    threads_.emplace_back([this] { scheduler_status_ = RunScheduler(TestClusterConfig(wire::SCHEDULER, port_, workers_, servers_), MakeTransport()); });
    server_status_.resize(servers);
    for (int s = 0; s < servers; ++s) {
      threads_.emplace_back([this, s] {
        ClusterConfig c = TestClusterConfig(wire::SERVER, port_, workers_, servers_);
        c.rank = s;
        server_status_[s] = RunServer(c, MakeTransport());
      });
    }
  }

  ~LocalJob() {
    for (auto& t : threads_) t.join();
  }

  // Workers' transports pass through wrap before they join (to watch what they send).
  using Wrap = std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport>)>;
  void WrapWorkerTransports(Wrap wrap) { wrap_ = std::move(wrap); }

  // fn(rank, cluster) runs on every worker; a worker that returns finishes its part.
  void Run(const std::function<void(int, Cluster*)>& fn) {
    for (int r = 0; r < workers_; ++r) {
      threads_.emplace_back([this, r, &fn] {
        ClusterConfig c = TestClusterConfig(wire::WORKER, port_, workers_, servers_);
        c.rank = r;
        std::unique_ptr<Cluster> cluster;
        Status s = Cluster::Join(c, wrap_ ? wrap_(MakeTransport()) : MakeTransport(), &cluster);
        ASSERT_TRUE(s.ok()) << s;
        fn(r, cluster.get());
        Status f = cluster->Finish(20000);
        EXPECT_TRUE(f.ok()) << f;
      });
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
    EXPECT_TRUE(scheduler_status_.ok()) << scheduler_status_;
    for (const Status& s : server_status_) EXPECT_TRUE(s.ok()) << s;
  }

 private:
  std::unique_ptr<Transport> MakeTransport() { return zmq_ ? NewZmqTransport() : NewInProcTransport(); }
  const bool zmq_;
  const int workers_, servers_, port_;
  Wrap wrap_;
  std::vector<std::thread> threads_;
  Status scheduler_status_;
  std::vector<Status> server_status_;
};

}  // namespace tally
