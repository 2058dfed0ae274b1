// The ZeroMQ transport: one PULL socket receives everything sent to this node; one PUSH
// socket per peer sends to it. PUSH/PULL keeps each sender's messages in order and needs
// no identities, since the Meta says who sent a message.
//
// Data frames go out without copying (zmq_msg_init_data): the frame holds a reference to
// the tensor's storage, dropped by ZeroMQ's free callback once the bytes are sent. Received
// frames become tensors that own the zmq_msg_t, so nothing is copied on arrival either.
// ZMQ_MAXMSGSIZE makes ZeroMQ itself refuse a frame larger than kMaxFrameBytes before
// allocating it.
#include <arpa/inet.h>
#include <zmq.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "kvstore/transport.h"

namespace tally {
namespace {

std::string ZmqError(const std::string& what) {
  return what + ": " + zmq_strerror(zmq_errno());
}

void ReleaseStorage(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<Storage>*>(hint); }

class ZmqTransport : public Transport {
 public:
  explicit ZmqTransport(int send_timeout_ms) : send_timeout_ms_(send_timeout_ms) {
    context_ = zmq_ctx_new();
    CHECK(context_ != nullptr) << ZmqError("zmq_ctx_new");
  }
  ~ZmqTransport() override {
    Close();
    zmq_ctx_term(context_);
  }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (receiver_) return Status::Internal("transport already bound");
    receiver_ = zmq_socket(context_, ZMQ_PULL);
    int64_t max_size = static_cast<int64_t>(kMaxFrameBytes);
    int linger = 0;
    zmq_setsockopt(receiver_, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size);
    zmq_setsockopt(receiver_, ZMQ_LINGER, &linger, sizeof linger);
    // An address literal binds that interface only; a name (localhost, a host name) binds all.
    in_addr v4;
    in6_addr v6;
    const bool literal = inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
    std::string endpoint = "tcp://" + (literal ? host : std::string("*")) + ":" +
                           (port == 0 ? std::string("*") : std::to_string(port));
    if (zmq_bind(receiver_, endpoint.c_str()) != 0) {
      Status s = Status::Unavailable(ZmqError("cannot bind " + endpoint));
      zmq_close(receiver_);
      receiver_ = nullptr;
      return s;
    }
    char last[256];
    size_t len = sizeof last;
    zmq_getsockopt(receiver_, ZMQ_LAST_ENDPOINT, last, &len);
    std::string bound(last);
    *bound_port = std::stoi(bound.substr(bound.rfind(':') + 1));
    return Status::Ok();
  }

  Status Connect(int id, const std::string& host, int port) override {
    void* socket = zmq_socket(context_, ZMQ_PUSH);
    int linger = 1000, timeout = send_timeout_ms_;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(socket, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    std::string endpoint = "tcp://" + host + ":" + std::to_string(port);
    if (zmq_connect(socket, endpoint.c_str()) != 0) {
      Status s = Status::Unavailable(ZmqError("cannot connect to node " + std::to_string(id) + " at " + endpoint));
      zmq_close(socket);
      return s;
    }
    std::lock_guard<std::mutex> lock(peers_mu_);
    auto& peer = peers_[id];
    if (!peer) peer = std::make_unique<Peer>();
    std::lock_guard<std::mutex> peer_lock(peer->mu);
    if (peer->socket) zmq_close(peer->socket);
    peer->socket = socket;
    peer->endpoint = endpoint;
    return Status::Ok();
  }

  Status Send(int id, const Message& msg) override {
    Peer* peer = nullptr;
    {
      std::lock_guard<std::mutex> lock(peers_mu_);
      auto it = peers_.find(id);
      if (it == peers_.end()) return Status::Internal("send to node " + std::to_string(id) + " before connecting");
      peer = it->second.get();
    }
    std::string meta = msg.meta.SerializeAsString();
    std::lock_guard<std::mutex> lock(peer->mu);
    if (!peer->socket) return Status::Unavailable("transport closed");
    zmq_msg_t frame;
    zmq_msg_init_size(&frame, meta.size());
    std::memcpy(zmq_msg_data(&frame), meta.data(), meta.size());
    if (zmq_msg_send(&frame, peer->socket, msg.data.empty() ? 0 : ZMQ_SNDMORE) < 0) {
      zmq_msg_close(&frame);
      return Status::Unavailable(ZmqError("send to node " + std::to_string(id) + " (" + peer->endpoint + ")"));
    }
    for (size_t i = 0; i < msg.data.size(); ++i) {
      const Tensor& t = msg.data[i];
      if (t.nbytes() == 0) {
        zmq_msg_init(&frame);
      } else {
        auto* hold = new std::shared_ptr<Storage>(t.storage());
        zmq_msg_init_data(&frame, t.raw_data(), t.nbytes(), ReleaseStorage, hold);
      }
      // Later parts of a multipart message never block: ZeroMQ admits the message whole.
      if (zmq_msg_send(&frame, peer->socket, i + 1 < msg.data.size() ? ZMQ_SNDMORE : 0) < 0) {
        zmq_msg_close(&frame);
        return Status::Unavailable(ZmqError("send to node " + std::to_string(id)));
      }
    }
    return Status::Ok();
  }

  Status Recv(Message* msg, int timeout_ms) override {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (!receiver_) return Status::Internal("Recv before Bind");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      int wait = -1;
      if (timeout_ms >= 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        wait = static_cast<int>(std::max<int64_t>(0, left.count()));
      }
      zmq_pollitem_t item = {receiver_, 0, ZMQ_POLLIN, 0};
      int n = zmq_poll(&item, 1, wait);
      if (n < 0 && zmq_errno() != EINTR) return Status::Unavailable(ZmqError("poll"));
      if (n <= 0) {
        if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
          return Status::Unavailable("no message within " + std::to_string(timeout_ms) + " ms");
        }
        continue;
      }
      Status s = ReceiveOne(msg);
      if (s.ok()) return s;
      LOG(WARNING) << "dropped a malformed message: " << s.message();
    }
  }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(peers_mu_);
      for (auto& [id, peer] : peers_) {
        std::lock_guard<std::mutex> peer_lock(peer->mu);
        if (peer->socket) zmq_close(peer->socket);
        peer->socket = nullptr;
      }
    }
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (receiver_) zmq_close(receiver_);
    receiver_ = nullptr;
  }

 private:
  struct Peer {
    std::mutex mu;
    void* socket = nullptr;  // GUARDED_BY(mu)
    std::string endpoint;
  };

  // Reads one whole multipart message; always consumes every part, valid or not.
  Status ReceiveOne(Message* msg) {
    std::vector<zmq_msg_t*> parts;
    int more = 1;
    while (more) {
      auto* part = new zmq_msg_t;
      zmq_msg_init(part);
      if (zmq_msg_recv(part, receiver_, 0) < 0) {
        zmq_msg_close(part);
        delete part;
        for (zmq_msg_t* p : parts) { zmq_msg_close(p); delete p; }
        return Status::Unavailable(ZmqError("receive"));
      }
      parts.push_back(part);
      more = zmq_msg_more(part);
    }
    Status s = Decode(parts, msg);
    if (!s.ok()) {
      for (zmq_msg_t* p : parts) { zmq_msg_close(p); delete p; }  // parts not yet owned by tensors
    }
    return s;
  }

  Status Decode(std::vector<zmq_msg_t*>& parts, Message* msg) {
    zmq_msg_t* head = parts[0];
    if (zmq_msg_size(head) > kMaxMetaBytes) return Status::InvalidArgument("meta of " + std::to_string(zmq_msg_size(head)) + " bytes");
    Message out;
    if (!out.meta.ParseFromArray(zmq_msg_data(head), static_cast<int>(zmq_msg_size(head)))) {
      return Status::InvalidArgument("meta does not parse");
    }
    const DType dtype = wire::DType_IsValid(out.meta.dtype()) ? FromWire(out.meta.dtype()) : DType::kF32;
    const size_t es = DTypeSize(dtype);
    for (size_t i = 1; i < parts.size(); ++i) {
      if (zmq_msg_size(parts[i]) % es != 0) return Status::InvalidArgument("data frame of odd size");
    }
    zmq_msg_close(head);
    delete head;
    for (size_t i = 1; i < parts.size(); ++i) {
      zmq_msg_t* part = parts[i];
      const int64_t n = static_cast<int64_t>(zmq_msg_size(part) / es);
      out.data.push_back(Tensor::FromBlob(zmq_msg_data(part), {n}, dtype, Device::Cpu(),
                                          [part](void*) { zmq_msg_close(part); delete part; }));
    }
    parts.clear();
    Status valid = ValidateMessage(out);
    if (!valid.ok()) return valid;  // out's tensors release their parts
    *msg = std::move(out);
    return Status::Ok();
  }

  void* context_;
  const int send_timeout_ms_;
  std::mutex recv_mu_;
  void* receiver_ = nullptr;  // GUARDED_BY(recv_mu_)
  std::mutex peers_mu_;
  std::map<int, std::unique_ptr<Peer>> peers_;  // GUARDED_BY(peers_mu_)
};

}  // namespace

std::unique_ptr<Transport> NewZmqTransport(int send_timeout_ms) {
  return std::make_unique<ZmqTransport>(send_timeout_ms);
}

}  // namespace tally
