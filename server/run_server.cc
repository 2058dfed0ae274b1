// RunServer: a server node's life. The cluster's receive thread only queues data messages,
// so that heartbeats and failure notices never wait behind a long update; one serving
// thread feeds them to the KVServer in arrival order.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <glog/logging.h>

#include "server/server.h"

namespace tally {
namespace {

// A queue of messages between the receive thread and the serving thread.
class MessageQueue {
 public:
  void Push(Message&& m) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return;
      q_.push_back(std::move(m));
    }
    cv_.notify_one();
  }
  // Blocks for the next message; false once closed.
  bool Pop(Message* m) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return closed_ || !q_.empty(); });
    if (closed_) return false;
    *m = std::move(q_.front());
    q_.pop_front();
    return true;
  }
  void Close() {
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      q_.clear();
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> q_;  // GUARDED_BY(mu_)
  bool closed_ = false;    // GUARDED_BY(mu_)
};

}  // namespace

Status RunServer(const ClusterConfig& cfg, std::unique_ptr<Transport> transport) {
  CHECK(cfg.role == wire::SERVER) << "RunServer for role " << wire::Role_Name(cfg.role);
  std::unique_ptr<Cluster> cluster;
  TALLY_RETURN_IF_ERROR(Cluster::Join(cfg, std::move(transport), &cluster));
  LOG(INFO) << "server: joined as " << DescribeNode(cluster->me()) << ", "
            << cluster->num_workers() << " workers, " << cluster->num_servers() << " servers";
  Cluster* c = cluster.get();
  KVServer server(c->num_servers(), c->num_workers(),
                  [c](int id, Message m) { return c->Send(id, std::move(m)); });
  MessageQueue queue;
  std::thread serving([&] {
    Message m;
    while (queue.Pop(&m)) server.Handle(std::move(m));
  });
  c->SetDataHandler([&queue](Message&& m) { queue.Push(std::move(m)); });
  Status s = c->WaitForShutdown();
  c->SetDataHandler([](Message&&) {});
  queue.Close();
  serving.join();
  if (s.ok()) {
    LOG(INFO) << "server: the job has ended";
  } else {
    LOG(ERROR) << "server: " << s;
  }
  return s;
}

}  // namespace tally
