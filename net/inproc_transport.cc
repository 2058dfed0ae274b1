// The in-process transport, for tests: named mailboxes in one process. The Meta goes
// through serialisation as on the wire; data tensors are handed over as they are.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "net/transport.h"

namespace tally {
namespace {

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> queue;  // GUARDED_BY(mu)
  bool bound = false;         // GUARDED_BY(mu)
  bool closed = false;        // GUARDED_BY(mu)
};

// Endpoints by name. As with TCP and ZeroMQ, a message may be sent before its receiver has
// bound: the mailbox exists from the first use of its name and keeps what arrives early.
class Registry {
 public:
  static Registry& Get() {
    static Registry* r = new Registry();
    return *r;
  }
  std::shared_ptr<Mailbox> Open(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& box = boxes_[name];
    if (!box) box = std::make_shared<Mailbox>();
    return box;
  }
  int NextPort() { return next_port_++; }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Mailbox>> boxes_;  // GUARDED_BY(mu_)
  std::atomic<int> next_port_{50000};
};

class InProcTransport : public Transport {
 public:
  ~InProcTransport() override { Close(); }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    if (port == 0) port = Registry::Get().NextPort();
    const std::string name = host + ":" + std::to_string(port);
    std::shared_ptr<Mailbox> box = Registry::Get().Open(name);
    {
      std::lock_guard<std::mutex> lock(box->mu);
      if (box->bound) return Status::Unavailable("in-process endpoint " + name + " is taken");
      box->bound = true;
      box->closed = false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    box_ = box;
    *bound_port = port;
    return Status::Ok();
  }

  Status Connect(int id, const std::string& host, int port, const std::string& /*peer*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    peers_[id] = host + ":" + std::to_string(port);
    return Status::Ok();
  }

  Status Send(int id, const Message& msg) override {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = peers_.find(id);
      if (it == peers_.end()) return Status::Internal("send to node " + std::to_string(id) + " before connecting");
      name = it->second;
    }
    Message copy;
    if (!copy.meta.ParseFromString(msg.meta.SerializeAsString())) return Status::Internal("meta does not round-trip");
    copy.data = msg.data;
    Status valid = ValidateMessage(copy);
    if (!valid.ok()) return Status::InvalidArgument("refusing to send a malformed message: " + valid.message());
    std::shared_ptr<Mailbox> box = Registry::Get().Open(name);
    std::lock_guard<std::mutex> lock(box->mu);
    if (box->closed) return Status::Unavailable("node " + std::to_string(id) + " (" + name + ") is gone");
    box->queue.push_back(std::move(copy));
    box->cv.notify_one();
    return Status::Ok();
  }

  Status Recv(Message* msg, int timeout_ms) override {
    std::shared_ptr<Mailbox> box;
    {
      std::lock_guard<std::mutex> lock(mu_);
      box = box_;
    }
    if (!box) return Status::Internal("Recv before Bind");
    std::unique_lock<std::mutex> lock(box->mu);
    auto ready = [&] { return !box->queue.empty(); };
    if (timeout_ms < 0) {
      box->cv.wait(lock, ready);
    } else if (!box->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
      return Status::Unavailable("no message within " + std::to_string(timeout_ms) + " ms");
    }
    *msg = std::move(box->queue.front());
    box->queue.pop_front();
    return Status::Ok();
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!box_) return;
    std::lock_guard<std::mutex> box_lock(box_->mu);
    box_->closed = true;
    box_->bound = false;
    box_->queue.clear();
  }

 private:
  std::mutex mu_;
  std::shared_ptr<Mailbox> box_;      // GUARDED_BY(mu_)
  std::map<int, std::string> peers_;  // GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<Transport> NewInProcTransport() { return std::make_unique<InProcTransport>(); }

}  // namespace tally
