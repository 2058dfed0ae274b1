// The ZeroMQ transport: one PULL socket receives everything sent to this node; one PUSH
// socket per peer sends to it. PUSH/PULL keeps each sender's messages in order and needs
// no identities, since the Meta says who sent a message.
//
// Data frames go out without copying (zmq_msg_init_data): the frame holds a reference to
// the tensor's storage, dropped by ZeroMQ's free callback once the bytes are sent. Received
// frames become tensors that own the zmq_msg_t, so nothing is copied on arrival either.
// ZMQ_MAXMSGSIZE makes ZeroMQ itself refuse a frame larger than kMaxFrameBytes before
// allocating it.
//
// Authentication (docs/security.md): with a CurveAuth, the receiving socket is a CURVE
// server and every sending socket a CURVE client. Keys are derived from the job's secret
// and the node's name (HMAC-SHA256), so every member can compute every member's public key.
// A ZAP handler, a thread on inproc://zeromq.zap.01 of this transport's context, admits a
// connecting client only if its public key is one of the job's and names it; ZeroMQ stamps
// that name on every message of the connection (the "User-Id" property), and a message
// whose sender_id is not the node of that name is dropped.
#include <arpa/inet.h>
#include <sodium.h>
#include <zmq.h>

#include <atomic>
#include <thread>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "net/transport.h"

namespace tally {
namespace {

std::string ZmqError(const std::string& what) {
  return what + ": " + zmq_strerror(zmq_errno());
}

void ReleaseStorage(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<Storage>*>(hint); }

// A node's CURVE key pair (binary, 32 bytes each), derived from the job's secret and name.
struct KeyPair {
  std::string public_key, secret_key;
};

KeyPair DeriveKeys(const std::string& job_secret, const std::string& name) {
  const std::string label = "tally curve key: " + name;
  unsigned char secret[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(job_secret.data()), job_secret.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  crypto_auth_hmacsha256_final(&st, secret);
  char z85_secret[41], z85_public[41];
  CHECK(zmq_z85_encode(z85_secret, secret, 32) != nullptr);
  CHECK_EQ(zmq_curve_public(z85_public, z85_secret), 0) << ZmqError("zmq_curve_public");
  KeyPair k;
  k.secret_key.assign(reinterpret_cast<const char*>(secret), 32);
  k.public_key.resize(32);
  CHECK(zmq_z85_decode(reinterpret_cast<uint8_t*>(k.public_key.data()), z85_public) != nullptr);
  sodium_memzero(secret, sizeof secret);
  sodium_memzero(z85_secret, sizeof z85_secret);
  return k;
}

// Receives the frames of one multipart message; false if the socket gave none.
bool RecvFrames(void* socket, std::vector<std::string>* frames) {
  frames->clear();
  int more = 1;
  while (more) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, socket, 0) < 0) {
      zmq_msg_close(&part);
      return false;
    }
    frames->emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
    more = zmq_msg_more(&part);
    zmq_msg_close(&part);
  }
  return true;
}

class ZmqTransport : public Transport {
 public:
  ZmqTransport(int send_timeout_ms, const CurveAuth* auth) : send_timeout_ms_(send_timeout_ms) {
    context_ = zmq_ctx_new();
    CHECK(context_ != nullptr) << ZmqError("zmq_ctx_new");
    if (auth != nullptr) StartAuth(*auth);
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
    if (auth_) {
      const int server = 1;
      zmq_setsockopt(receiver_, ZMQ_CURVE_SERVER, &server, sizeof server);
      zmq_setsockopt(receiver_, ZMQ_CURVE_SECRETKEY, keys_.secret_key.data(), 32);
      zmq_setsockopt(receiver_, ZMQ_ZAP_DOMAIN, "tally", 5);
    }
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

  Status Connect(int id, const std::string& host, int port, const std::string& peer_name) override {
    void* socket = zmq_socket(context_, ZMQ_PUSH);
    int linger = 1000, timeout = send_timeout_ms_;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(socket, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    if (auth_) {
      const std::string name = peer_name.empty() ? auth_->job.Of(id) : peer_name;
      auto it = members_by_name_.find(name);
      if (it == members_by_name_.end()) {
        zmq_close(socket);
        return Status::InvalidArgument("connect to node " + std::to_string(id) + ": '" + name +
                                       "' is not a node of this job");
      }
      zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, it->second.data(), 32);
      zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, keys_.public_key.data(), 32);
      zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys_.secret_key.data(), 32);
    }
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
      if (s.ok()) s = CheckSender(*msg);
      if (s.ok()) return s;
      LOG_EVERY_N(WARNING, 100) << "dropped a message: " << s.message() << " (" << google::COUNTER << " so far)";
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
    {
      std::lock_guard<std::mutex> lock(recv_mu_);
      if (receiver_) zmq_close(receiver_);
      receiver_ = nullptr;
    }
    zap_stop_ = true;
    if (zap_thread_.joinable()) zap_thread_.join();
  }

 private:
  struct Peer {
    std::mutex mu;
    void* socket = nullptr;  // GUARDED_BY(mu)
    std::string endpoint;
  };

  // Reads one whole multipart message; always consumes every part, valid or not.
  Status ReceiveOne(Message* msg) {
    std::vector<WireFrame> frames;
    int more = 1;
    while (more) {
      auto* part = new zmq_msg_t;
      zmq_msg_init(part);
      if (zmq_msg_recv(part, receiver_, 0) < 0) {
        zmq_msg_close(part);
        delete part;
        for (WireFrame& f : frames) f.release();
        return Status::Unavailable(ZmqError("receive"));
      }
      more = zmq_msg_more(part);
      if (frames.empty()) {
        const char* user = zmq_msg_gets(part, "User-Id");
        msg->peer = user != nullptr ? user : "";
      }
      frames.push_back({zmq_msg_data(part), zmq_msg_size(part), [part] { zmq_msg_close(part); delete part; }});
    }
    std::string peer = std::move(msg->peer);
    TALLY_RETURN_IF_ERROR(DecodeMessage(std::move(frames), msg));
    msg->peer = std::move(peer);
    return Status::Ok();
  }

  // With authentication, a message that names a sender must come from that node. A
  // REGISTER names none (sender_id -1): the scheduler checks its claim against msg.peer.
  Status CheckSender(const Message& msg) const {
    if (!auth_) return Status::Ok();
    if (msg.peer.empty()) return Status::InvalidArgument("unauthenticated message");
    const int from = msg.meta.sender_id();
    if (from < 0) return Status::Ok();
    const std::string claimed = auth_->job.Of(from);
    if (claimed != msg.peer) {
      return Status::InvalidArgument(msg.peer + " sent a message as node " + std::to_string(from) +
                                      (claimed.empty() ? "" : " (" + claimed + ")"));
    }
    return Status::Ok();
  }

  void StartAuth(const CurveAuth& auth) {
    auth_ = std::make_unique<CurveAuth>(auth);
    CHECK(zmq_has("curve")) << "this ZeroMQ library has no CURVE support";
    keys_ = DeriveKeys(auth.secret, auth.self);
    for (int id = 0; id < auth.job.size(); ++id) {
      const std::string name = auth.job.Of(id);
      const std::string pub = DeriveKeys(auth.secret, name).public_key;
      members_by_name_[name] = pub;
      members_by_key_[pub] = name;
    }
    // Bound before any CURVE socket exists, so no handshake can miss the handler.
    void* zap = zmq_socket(context_, ZMQ_REP);
    int linger = 0;
    zmq_setsockopt(zap, ZMQ_LINGER, &linger, sizeof linger);
    CHECK_EQ(zmq_bind(zap, "inproc://zeromq.zap.01"), 0) << ZmqError("bind the ZAP handler");
    zap_thread_ = std::thread([this, zap] { ZapLoop(zap); });
  }

  // ZAP (ZeroMQ RFC 27): a request is version, request id, domain, address, routing id,
  // mechanism and credentials (for CURVE, the client's public key); the reply is version,
  // request id, status code, status text, user id and metadata.
  void ZapLoop(void* zap) {
    std::vector<std::string> req;
    while (!zap_stop_) {
      zmq_pollitem_t item = {zap, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 100) <= 0) continue;
      if (!RecvFrames(zap, &req)) continue;
      std::string code = "400", text = "not a member of this job", user;
      if (req.size() >= 7 && req[0] == "1.0" && req[5] == "CURVE") {
        auto it = members_by_key_.find(req[6]);
        if (it != members_by_key_.end()) {
          code = "200";
          text = "OK";
          user = it->second;
        }
      }
      if (code != "200") {
        LOG_EVERY_N(WARNING, 100) << "refused a connection from " << (req.size() > 3 ? req[3] : std::string("?"))
                                  << ": its key is not one of this job's (" << google::COUNTER << " refused so far)";
      }
      const std::string request_id = req.size() > 1 ? req[1] : std::string();
      const std::string reply[] = {"1.0", request_id, code, text, user, ""};
      for (int i = 0; i < 6; ++i) zmq_send(zap, reply[i].data(), reply[i].size(), i < 5 ? ZMQ_SNDMORE : 0);
    }
    zmq_close(zap);
  }

  void* context_;
  const int send_timeout_ms_;
  std::unique_ptr<CurveAuth> auth_;  // null: plain
  KeyPair keys_;
  std::map<std::string, std::string> members_by_name_, members_by_key_;  // name <-> public key
  std::thread zap_thread_;
  std::atomic<bool> zap_stop_{false};
  std::mutex recv_mu_;
  void* receiver_ = nullptr;  // GUARDED_BY(recv_mu_)
  std::mutex peers_mu_;
  std::map<int, std::unique_ptr<Peer>> peers_;  // GUARDED_BY(peers_mu_)
};

}  // namespace

std::unique_ptr<Transport> NewZmqTransport(int send_timeout_ms, const CurveAuth* auth) {
  return std::make_unique<ZmqTransport>(send_timeout_ms, auth);
}

std::string NodeName(wire::Role role, int rank) {
  switch (role) {
    case wire::SCHEDULER: return "scheduler";
    case wire::SERVER: return "server " + std::to_string(rank);
    case wire::WORKER: return "worker " + std::to_string(rank);
    default: return "";
  }
}

std::string JobNames::Of(int id) const {
  const NodeIds ids{num_servers, num_workers};
  if (id == kSchedulerId) return NodeName(wire::SCHEDULER, 0);
  if (ids.IsServer(id)) return NodeName(wire::SERVER, ids.ServerRank(id));
  if (ids.IsWorker(id)) return NodeName(wire::WORKER, ids.WorkerRank(id));
  return "";
}

}  // namespace tally
