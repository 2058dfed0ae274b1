// The ZeroMQ transport: one receiving endpoint takes everything sent to this node; one
// DEALER socket per peer sends to it. Each sender's messages arrive in order, on a TCP
// connection of their own, which the secure handshake binds its keys to.
//
// The receiving endpoint speaks ZeroMQ's wire protocol itself (ZmtpReceiver): ZeroMQ's
// ROUTER socket keeps a multipart message whole in memory before the application sees its
// first frame and cannot close one peer's connection, so it could not bound what a
// stranger makes it hold. The DEALERs are ZeroMQ's.
//
// Plain, data frames go out without copying (zmq_msg_init_data): the frame holds a
// reference to the tensor's storage, dropped by ZeroMQ's free callback once the bytes are
// sent. Received frames become tensors that own the receiver's buffers, so nothing is
// copied on arrival either; a frame over the size cap closes its connection before
// anything is allocated for it.
//
// Secure (docs/security.md), every DEALER runs a ClientSession: its first Send to the peer
// sends a HELLO, waits for the WELCOME and sends the CONFIRM, then every message is sealed
// into host blocks reused from message to message (AES-256-GCM, the records spread over the crypto threads) on the sending
// thread. The receiver answers handshakes on its own thread and keeps nothing for them
// until a CONFIRM verifies; Recv opens sealed messages in place before anything parses
// them.
#include <arpa/inet.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/host_blocks.h"
#include "net/secure_session.h"
#include "net/landing.h"
#include "net/transport.h"
#include "net/zmtp_receiver.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

// A HELLO with no answer yet is sent again this often (the same bytes: any answer to it
// will do), until the send timeout: a receiver may have closed the connection it came on
// to make room, or dropped it over the handshake rate.
constexpr int kHelloRetryMs = 1000;

std::string ZmqError(const std::string& what) {
  return what + ": " + zmq_strerror(zmq_errno());
}

void ReleaseStorage(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<Storage>*>(hint); }
void ReleaseBlock(void* data, void* hint) { ReleaseHostBlock(data, reinterpret_cast<size_t>(hint)); }

// A DEALER's routing id (ZMTP's Identity), random. The receiver tells connections apart
// by their TCP connection, not by this; ZeroMQ reserves ids that start with a zero byte.
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
    // Every byte a node sends crosses a ZeroMQ I/O thread (one by default), which is a
    // worker's one thread writing to every server. With cores to spare, its connections
    // share a few, so that pushes to several servers are written side by side.
    const unsigned cores = std::thread::hardware_concurrency();
    const int io_threads = static_cast<int>(std::clamp(cores / 4, 1u, 4u));
    if (io_threads > 1) CHECK_EQ(zmq_ctx_set(context_, ZMQ_IO_THREADS, io_threads), 0) << ZmqError("ZMQ_IO_THREADS");
    if (auth != nullptr) {
      auth_ = std::make_unique<JobAuth>(*auth);
      responder_ = std::make_unique<Responder>(auth_.get());
    }
  }
  ~ZmqTransport() override {
    Close();
    zmq_ctx_term(context_);
  }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    std::lock_guard<std::mutex> lock(bind_mu_);
    if (receiver_) return Status::Internal("transport already bound");
    ZmtpReceiver::Options options;
    options.responder = responder_.get();
    options.max_frame_bytes = auth_ ? kSealedHeaderBytes + SealedBytes(kMaxFrameBytes) : kMaxFrameBytes;
    options.rejected = &rejected_;
    std::unique_ptr<ZmtpReceiver> receiver;
    TALLY_RETURN_IF_ERROR(ZmtpReceiver::Start(host, port, options, &receiver, bound_port));
    receiver_ = std::move(receiver);
    port_ = *bound_port;
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
    ZmtpReceiver* receiver = Receiver();
    if (receiver == nullptr) return Status::Internal("Recv before Bind");
    std::lock_guard<std::mutex> lock(recv_mu_);
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      int wait = -1;
      if (timeout_ms >= 0) {
        wait = static_cast<int>(std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
      }
      ZmtpReceiver::Incoming in;
      TALLY_RETURN_IF_ERROR(receiver->Take(&in, wait));
      const std::string from = in.from;
      Status s = Accept(std::move(in), msg);
      if (s.ok()) return s;
      ++rejected_;
      LOG_EVERY_N(WARNING, 100) << "dropped a message from " << from << ": " << s.message() << " ("
                                << google::COUNTER << " so far)";
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
    // Not under recv_mu_: a Recv waiting for a message holds it; closing wakes it.
    if (ZmtpReceiver* receiver = Receiver()) receiver->Close();
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
  // connection it no longer knows (it restarted, or the connection is new) makes the next
  // Send handshake again; a WELCOME that came after its handshake gave up completes it.
  void TakeReplies(int id, Peer* peer) {
    std::string reply;
    while (HasInput(peer->socket) && TakeReply(peer, &reply)) {
      const bool was_ready = peer->session->ready();
      Status s = peer->session->OnReply(reply.data(), reply.size());
      if (s.ok() && !was_ready && peer->session->ready()) s = SendConfirm(id, peer);
      if (!s.ok()) LOG(WARNING) << Describe(id, *peer) << ": " << s.message();
    }
  }

  Status SendConfirm(int id, Peer* peer) {
    const std::string& confirm = peer->session->confirm();
    if (zmq_send(peer->socket, confirm.data(), confirm.size(), 0) < 0) {
      return Status::Unavailable(ZmqError("send the secure handshake to " + Describe(id, *peer)));
    }
    return Status::Ok();
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

  ZmtpReceiver* Receiver() {
    std::lock_guard<std::mutex> lock(bind_mu_);
    return receiver_.get();
  }

  // Makes the peer's session ready: a HELLO (sent again while unanswered), its WELCOME
  // within the send timeout, then the CONFIRM that makes the peer keep the session.
  Status Handshake(int id, Peer* peer) {
    TakeReplies(id, peer);
    if (peer->session->ready()) return Status::Ok();
    peer->session->Hello();
    const auto deadline = Clock::now() + std::chrono::milliseconds(send_timeout_ms_);
    auto next_hello = Clock::now();
    while (!peer->session->ready()) {
      const auto now = Clock::now();
      if (now >= deadline) {
        return Status::Unavailable(Describe(id, *peer) + " did not answer the secure handshake within " +
                                   std::to_string(send_timeout_ms_) + " ms (is it up, and does it hold the job's secret?)");
      }
      if (now >= next_hello) {
        const std::string& hello = peer->session->hello();
        if (zmq_send(peer->socket, hello.data(), hello.size(), 0) < 0) {
          return Status::Unavailable(ZmqError("send the secure handshake to " + Describe(id, *peer)));
        }
        next_hello = now + std::chrono::milliseconds(kHelloRetryMs);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline, next_hello) - now);
      zmq_pollitem_t item = {peer->socket, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, std::max<long>(1, wait.count())) <= 0) continue;  // timeout or EINTR
      std::string reply;
      if (!TakeReply(peer, &reply)) continue;
      RefuseReason why;
      // A kNoSession refusal answers data sent before this HELLO: the WELCOME is still to come.
      const bool stale = ParseRefuse(reply.data(), reply.size(), &why) && why == RefuseReason::kNoSession;
      Status s = stale ? Status::Ok() : peer->session->OnReply(reply.data(), reply.size());
      if (!s.ok()) return Status::Unavailable(Describe(id, *peer) + ": " + s.message());
    }
    return SendConfirm(id, peer);
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
    std::vector<size_t> sizes;
    Status sealable = peer->session->SealedSizes(meta, data, &sizes);
    if (!sealable.ok()) return Status::InvalidArgument("send to " + Describe(id, *peer) + ": " + sealable.message());
    std::vector<zmq_msg_t> frames(sizes.size());
    std::vector<uint8_t*> outs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] < kMinHostBlockBytes) {
        zmq_msg_init_size(&frames[i], sizes[i]);
      } else {
        // The size is the hint ZeroMQ hands back to the free callback.
        void* block = AllocateHostBlock(sizes[i]);
        zmq_msg_init_data(&frames[i], block, sizes[i], ReleaseBlock, reinterpret_cast<void*>(sizes[i]));
      }
      outs.push_back(static_cast<uint8_t*>(zmq_msg_data(&frames[i])));
    }
    peer->session->Seal(meta, data, outs);
    return SendFrames(id, peer, &frames);
  }

  // Secure: where an answer's one data frame is opened when its request registered a
  // landing (net/landing.h; the plain receiver reads such frames there itself). *claimed:
  // the landing taken, to be marked landed once the message is opened or refused.
  ServerSession::Place LandingPlace(size_t frames, LandingKey* claimed, bool* took) const {
    const int port = port_.load();
    if (frames != 2 || !Landings::Get().Any(port)) return nullptr;
    return [=](const uint8_t* meta, size_t meta_bytes, size_t part, size_t plain) -> uint8_t* {
      wire::Meta m;
      if (part != 1 || !m.ParseFromArray(meta, static_cast<int>(meta_bytes)) || !AnswerMayLand(port, m, claimed)) {
        return nullptr;
      }
      void* dst = Landings::Get().Claim(*claimed, plain, m.dtype());
      *took = dst != nullptr;
      return static_cast<uint8_t*>(dst);
    };
  }

  // Opens (secure) and decodes one message from the receiver; always takes its frames.
  Status Accept(ZmtpReceiver::Incoming in, Message* msg) {
    std::string peer;
    if (auth_) {
      LandingKey landing;
      bool took = false;
      Status s = in.session ? in.session->Open(&in.frames, LandingPlace(in.frames.size(), &landing, &took))
                            : Status::Internal("a message from a connection that proved nothing");
      // A refused message may have left bytes there: its answer comes again (delivery
      // resends what is not acknowledged) and is copied over them before the pull is done.
      if (took) Landings::Get().Landed(landing);
      if (!s.ok()) {
        for (WireFrame& f : in.frames) f.release();
        return s;
      }
      peer = in.session->peer();
    }
    TALLY_RETURN_IF_ERROR(DecodeMessage(std::move(in.frames), msg));
    msg->peer = std::move(peer);
    return CheckSender(*msg);
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
  std::unique_ptr<Responder> responder_;    // the receiver's, on its thread
  std::atomic<int64_t> rejected_{0};
  std::mutex bind_mu_;
  std::unique_ptr<ZmtpReceiver> receiver_;  // GUARDED_BY(bind_mu_): set once, by Bind
  std::atomic<int> port_{0};                // the bound port, under which landings are registered
  std::mutex recv_mu_;                      // one Recv at a time
  std::mutex peers_mu_;
  std::map<int, std::unique_ptr<Peer>> peers_;  // GUARDED_BY(peers_mu_)
};

}  // namespace

std::unique_ptr<Transport> NewZmqTransport(int send_timeout_ms, const JobAuth* auth) {
  return std::make_unique<ZmqTransport>(send_timeout_ms, auth);
}

}  // namespace tally
