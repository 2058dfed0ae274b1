// The ZeroMQ transport: one ROUTER socket receives everything sent to this node; one
// DEALER socket per peer sends to it. Each sender's messages arrive in order, and the
// ROUTER names the connection each came on (its routing id), which the secure handshake
// needs: the receiver answers a HELLO on the connection it came from.
//
// Plain, data frames go out without copying (zmq_msg_init_data): the frame holds a
// reference to the tensor's storage, dropped by ZeroMQ's free callback once the bytes are
// sent. Received frames become tensors that own the zmq_msg_t, so nothing is copied on
// arrival either. ZMQ_MAXMSGSIZE makes ZeroMQ itself refuse an oversized frame before
// allocating it.
//
// Secure (docs/security.md), every DEALER runs a ClientSession: its first Send to the peer
// sends a HELLO and waits for the WELCOME, then every message is sealed into new buffers
// (AES-256-GCM, the records spread over the crypto threads) on the sending thread. The
// ROUTER's ServerSessions answer HELLOs and open sealed messages in place, on the
// receiving thread, before anything parses them.
#include <arpa/inet.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "net/secure_session.h"
#include "net/transport.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

std::string ZmqError(const std::string& what) {
  return what + ": " + zmq_strerror(zmq_errno());
}

void ReleaseStorage(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<Storage>*>(hint); }

// A DEALER's routing id: random, so a reconnecting process is a new connection to the
// receiver; ZeroMQ reserves ids that start with a zero byte.
std::string NewRoutingId() {
  std::string id(16, '\0');
  RandomBytes(id.data(), id.size());
  id[0] = static_cast<char>(id[0] | 1);
  return id;
}

class ZmqTransport : public Transport {
 public:
  ZmqTransport(int send_timeout_ms, const JobAuth* auth) : send_timeout_ms_(send_timeout_ms) {
    context_ = zmq_ctx_new();
    CHECK(context_ != nullptr) << ZmqError("zmq_ctx_new");
    if (auth != nullptr) {
      auth_ = std::make_unique<JobAuth>(*auth);
      sessions_ = std::make_unique<ServerSessions>(auth_.get());
    }
  }
  ~ZmqTransport() override {
    Close();
    zmq_ctx_term(context_);
  }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (receiver_) return Status::Internal("transport already bound");
    receiver_ = zmq_socket(context_, ZMQ_ROUTER);
    int64_t max_size = static_cast<int64_t>(auth_ ? kSealedHeaderBytes + SealedBytes(kMaxFrameBytes) : kMaxFrameBytes);
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

  Status Connect(int id, const std::string& host, int port, const std::string& peer_name) override {
    std::unique_ptr<ClientSession> session;
    if (auth_) {
      const std::string name = peer_name.empty() ? auth_->job.Of(id) : peer_name;
      if (name.empty() || !auth_->job.Has(name)) {
        return Status::InvalidArgument("connect to node " + std::to_string(id) + ": '" + name +
                                       "' is not a node of this job");
      }
      session = std::make_unique<ClientSession>(auth_.get(), name);
    }
    void* socket = zmq_socket(context_, ZMQ_DEALER);
    int linger = 1000, timeout = send_timeout_ms_;
    const std::string routing_id = NewRoutingId();
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(socket, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt(socket, ZMQ_ROUTING_ID, routing_id.data(), routing_id.size());
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
    peer->session = std::move(session);
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
    const std::string meta = msg.meta.SerializeAsString();
    std::lock_guard<std::mutex> lock(peer->mu);
    if (!peer->socket) return Status::Unavailable("transport closed");
    if (peer->session) {
      TALLY_RETURN_IF_ERROR(Handshake(id, peer));
      return SendSealed(id, peer, meta, msg.data);
    }
    return SendPlain(id, peer, meta, msg.data);
  }

  Status Recv(Message* msg, int timeout_ms) override {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (!receiver_) return Status::Internal("Recv before Bind");
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      if (!backlog_.empty()) {
        *msg = std::move(backlog_.front());
        backlog_.pop_front();
        return Status::Ok();
      }
      int wait = -1;
      if (timeout_ms >= 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        wait = static_cast<int>(std::max<int64_t>(0, left.count()));
      }
      zmq_pollitem_t item = {receiver_, 0, ZMQ_POLLIN, 0};
      int n = zmq_poll(&item, 1, wait);
      if (n < 0 && zmq_errno() != EINTR) return Status::Unavailable(ZmqError("poll"));
      if (n <= 0) {
        if (timeout_ms >= 0 && Clock::now() >= deadline) {
          return Status::Unavailable("no message within " + std::to_string(timeout_ms) + " ms");
        }
        continue;
      }
      if (TakeOne(msg)) return Status::Ok();
    }
  }

  TransportCounters Counters() override {
    TransportCounters c;
    c.rejected = rejected_;
    return c;
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
    void* socket = nullptr;                  // GUARDED_BY(mu)
    std::unique_ptr<ClientSession> session;  // GUARDED_BY(mu); null: plain
    std::string endpoint;
  };

  std::string Describe(int id, const Peer& peer) const {
    return "node " + std::to_string(id) + " (" + peer.session->server() + ", " + peer.endpoint + ")";
  }

  // Takes the answers the peer sent on this connection without waiting: a REFUSE for a
  // connection it no longer knows (it restarted) makes the next Send handshake again.
  void TakeReplies(int id, Peer* peer) {
    std::string reply;
    while (HasInput(peer->socket) && TakeReply(peer, &reply)) {
      Status s = peer->session->OnReply(reply.data(), reply.size());
      if (!s.ok()) LOG(WARNING) << Describe(id, *peer) << ": " << s.message();
    }
  }

  // Whether a socket has something to receive now.
  static bool HasInput(void* socket) {
    int events = 0;
    size_t len = sizeof events;
    return zmq_getsockopt(socket, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN);
  }

  // Receives, without waiting, one frame the peer sent back on this connection (a
  // handshake answer: a few dozen bytes).
  static bool TakeReply(Peer* peer, std::string* reply) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    const bool got = zmq_msg_recv(&part, peer->socket, ZMQ_DONTWAIT) >= 0;
    if (got) reply->assign(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
    zmq_msg_close(&part);
    return got;
  }

  // Receives one message; true if it is one for Recv to return, false if it was a
  // handshake (answered) or dropped (counted and logged). REQUIRES: recv_mu_ held.
  bool TakeOne(Message* msg) {
    bool handshake = false;
    Status s = ReceiveOne(msg, &handshake);
    if (s.ok() && handshake) return false;
    if (s.ok()) s = CheckSender(*msg);
    if (s.ok()) return true;
    ++rejected_;
    LOG_EVERY_N(WARNING, 100) << "dropped a message: " << s.message() << " (" << google::COUNTER << " so far)";
    return false;
  }

  // Answers the HELLOs waiting at this node's receiving socket, keeping any other message
  // for Recv. A thread waiting for a peer's WELCOME calls this while no one is in Recv: the
  // peer may be waiting for this node's WELCOME just the same, on the thread that would
  // otherwise call Recv (it sends acknowledgements), and neither would ever answer.
  void ServeHandshakes() {
    std::unique_lock<std::mutex> lock(recv_mu_, std::try_to_lock);
    if (!lock.owns_lock() || !receiver_) return;
    while (HasInput(receiver_)) {
      Message m;
      if (TakeOne(&m)) backlog_.push_back(std::move(m));
    }
  }

  // Makes the peer's session ready: a HELLO, then its WELCOME within the send timeout.
  Status Handshake(int id, Peer* peer) {
    TakeReplies(id, peer);
    if (peer->session->ready()) return Status::Ok();
    const std::string hello = peer->session->Hello();
    if (zmq_send(peer->socket, hello.data(), hello.size(), 0) < 0) {
      return Status::Unavailable(ZmqError("send the secure handshake to " + Describe(id, *peer)));
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(send_timeout_ms_);
    while (!peer->session->ready()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      ServeHandshakes();
      zmq_pollitem_t item = {peer->socket, 0, ZMQ_POLLIN, 0};
      if (left <= 0 || zmq_poll(&item, 1, std::min<long>(left, 2)) <= 0) {
        if (Clock::now() < deadline) continue;  // EINTR
        return Status::Unavailable(Describe(id, *peer) + " did not answer the secure handshake within " +
                                   std::to_string(send_timeout_ms_) + " ms (is it up, and does it hold the job's secret?)");
      }
      std::string reply;
      if (!TakeReply(peer, &reply)) continue;
      RefuseReason why;
      // A kNoSession refusal answers data sent before this HELLO: the WELCOME is still to come.
      const bool stale = ParseRefuse(reply.data(), reply.size(), &why) && why == RefuseReason::kNoSession;
      Status s = stale ? Status::Ok() : peer->session->OnReply(reply.data(), reply.size());
      if (!s.ok()) return Status::Unavailable(Describe(id, *peer) + ": " + s.message());
    }
    return Status::Ok();
  }

  Status SendFrames(int id, Peer* peer, std::vector<zmq_msg_t>* frames) {
    for (size_t i = 0; i < frames->size(); ++i) {
      // Later parts of a multipart message never block: ZeroMQ admits the message whole.
      if (zmq_msg_send(&(*frames)[i], peer->socket, i + 1 < frames->size() ? ZMQ_SNDMORE : 0) < 0) {
        Status s = Status::Unavailable(ZmqError("send to node " + std::to_string(id) + " (" + peer->endpoint + ")"));
        for (size_t j = i; j < frames->size(); ++j) zmq_msg_close(&(*frames)[j]);
        return s;
      }
    }
    return Status::Ok();
  }

  Status SendPlain(int id, Peer* peer, const std::string& meta, const std::vector<Tensor>& data) {
    std::vector<zmq_msg_t> frames(data.size() + 1);
    zmq_msg_init_size(&frames[0], meta.size());
    std::memcpy(zmq_msg_data(&frames[0]), meta.data(), meta.size());
    for (size_t i = 0; i < data.size(); ++i) {
      const Tensor& t = data[i];
      if (t.nbytes() == 0) {
        zmq_msg_init(&frames[i + 1]);
      } else {
        auto* hold = new std::shared_ptr<Storage>(t.storage());
        zmq_msg_init_data(&frames[i + 1], t.raw_data(), t.nbytes(), ReleaseStorage, hold);
      }
    }
    return SendFrames(id, peer, &frames);
  }

  Status SendSealed(int id, Peer* peer, const std::string& meta, const std::vector<Tensor>& data) {
    const std::vector<size_t> sizes = peer->session->SealedSizes(meta, data);
    std::vector<zmq_msg_t> frames(sizes.size());
    std::vector<uint8_t*> outs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      zmq_msg_init_size(&frames[i], sizes[i]);
      outs.push_back(static_cast<uint8_t*>(zmq_msg_data(&frames[i])));
    }
    peer->session->Seal(meta, data, outs);
    return SendFrames(id, peer, &frames);
  }

  // Reads one whole multipart message (the routing id, then the message's frames); always
  // consumes every part, valid or not. *handshake: it was a HELLO, answered here.
  Status ReceiveOne(Message* msg, bool* handshake) {
    std::string routing_id;
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
      if (routing_id.empty()) {
        routing_id.assign(static_cast<const char*>(zmq_msg_data(part)), zmq_msg_size(part));
        zmq_msg_close(part);
        delete part;
        continue;
      }
      frames.push_back({zmq_msg_data(part), zmq_msg_size(part), [part] { zmq_msg_close(part); delete part; }});
    }
    std::string peer;
    if (sessions_) {
      std::string answer;
      Status s = Unseal(routing_id, &frames, &peer, &answer, handshake);
      if (!answer.empty()) {
        zmq_send(receiver_, routing_id.data(), routing_id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(receiver_, answer.data(), answer.size(), ZMQ_DONTWAIT);
      }
      if (!s.ok() || *handshake) {
        for (WireFrame& f : frames) f.release();
        return s;
      }
    }
    TALLY_RETURN_IF_ERROR(DecodeMessage(std::move(frames), msg));
    msg->peer = std::move(peer);
    return Status::Ok();
  }

  Status Unseal(const std::string& routing_id, std::vector<WireFrame>* frames, std::string* peer, std::string* answer,
                bool* handshake) {
    if (frames->size() == 1 && SecureTypeOf((*frames)[0].data, (*frames)[0].size) == uint8_t(SecureType::kHello)) {
      *handshake = true;
      std::string why;
      *answer = sessions_->OnHandshake(routing_id, (*frames)[0].data, (*frames)[0].size, &why);
      if (!why.empty()) return Status::InvalidArgument("refused a handshake: " + why);
      return Status::Ok();
    }
    return sessions_->Open(routing_id, frames, peer, answer);
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

  void* context_;
  const int send_timeout_ms_;
  std::unique_ptr<JobAuth> auth_;           // null: plain
  std::unique_ptr<ServerSessions> sessions_;  // used under recv_mu_
  std::atomic<int64_t> rejected_{0};
  std::mutex recv_mu_;
  void* receiver_ = nullptr;     // GUARDED_BY(recv_mu_)
  std::deque<Message> backlog_;  // GUARDED_BY(recv_mu_): taken in by ServeHandshakes
  std::mutex peers_mu_;
  std::map<int, std::unique_ptr<Peer>> peers_;  // GUARDED_BY(peers_mu_)
};

}  // namespace

std::unique_ptr<Transport> NewZmqTransport(int send_timeout_ms, const JobAuth* auth) {
  return std::make_unique<ZmqTransport>(send_timeout_ms, auth);
}

}  // namespace tally
