// One accepted connection of a ZmtpReceiver (zmtp_receiver.h), private to it: the ZMTP
// stream, what the connection may still send before it proves the job's secret, its
// handshakes and the message it is in the middle of.
//
//   Connection c(&owner, id, fd, "10.0.0.2:41234", /*proved=*/!secure);
//   c.Send(ZmtpGreeting("ROUTER"), &why);       // then, whenever the socket is readable:
//   if (!c.Read(staging, &why)) { close it }     // whole messages go to owner.Enqueue
//
// Not thread-safe: the receiving thread's.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "net/landing.h"
#include "net/secure_session.h"
#include "net/zmtp.h"
#include "net/zmtp_receiver.h"

namespace tally {

class Connection;

// What a connection asks of the receiver that owns it.
class ConnectionOwner {
 public:
  virtual ~ConnectionOwner() = default;
  virtual Responder* responder() const = 0;  // null: plain
  virtual size_t max_frame_bytes() const = 0;
  // Whether proved connections wait (the queue of whole messages is full).
  virtual bool reading_paused() const = 0;
  virtual void CountRejected() = 0;
  virtual void Count(int64_t ZmtpReceiver::Counters::*field) = 0;
  virtual void Enqueue(ZmtpReceiver::Incoming in) = 0;
  // The connection proved the secret (its first CONFIRM verified).
  virtual void Proved(Connection* c) = 0;
  // The listening port under which this node's landings are registered (net/landing.h);
  // 0: none are taken (a secure receiver opens sealed frames where they were read).
  virtual int landing_port() const { return 0; }
  // The events to wait for on its socket may have changed.
  virtual void Watch(Connection* c) = 0;
};

// Frees every frame and empties the vector.
void ReleaseFrames(std::vector<WireFrame>* frames);

// The size of the buffer Connection::Read reads headers and small frames into.
constexpr size_t kZmtpStagingBytes = 64 << 10;

// One accepted TCP connection: its ZMTP stream, what it may still send before it proves
// the secret, and the message it is in the middle of. Used by the receiving thread only.
class Connection : public ZmtpDecoder::Sink {
 public:
  Connection(ConnectionOwner* owner, uint64_t id, int fd, std::string from, bool proved)
      : owner_(owner), id_(id), fd_(fd), from_(std::move(from)), proved_(proved),
        last_refill_(std::chrono::steady_clock::now()) {}
  ~Connection() override;

  uint64_t id() const { return id_; }
  int fd() const { return fd_; }
  const std::string& from() const { return from_; }
  bool proved() const { return proved_; }
  bool over_budget() const { return over_budget_; }
  bool wants_output() const { return !out_.empty(); }
  uint32_t watched = 0;                  // the epoll events registered for it
  std::list<uint64_t>::iterator unproved;  // its place among the owner's unproved, oldest first

  // Reads what the socket holds, up to one turn's worth, through `staging`
  // (kZmtpStagingBytes). False: close it (*why; empty when the peer hung up).
  bool Read(uint8_t* staging, std::string* why);
  // Queues bytes for the peer and writes what the socket takes. False: close it.
  bool Send(const std::string& bytes, std::string* why);
  bool Flush(std::string* why);

  // ZmtpDecoder::Sink: the decoder's callbacks, from within Read.
  bool OnReady(const std::string& socket_type, const std::string& identity, std::string* why) override;
  bool OnCommand(std::string* why) override;
  bool OnFrame(uint64_t size, bool more, uint8_t** dest, uint64_t* keep, std::string* why) override;
  bool OnFrameEnd(std::string* why) override;

 private:
  bool CountUnproved(std::string* why);
  bool UnprovedMessage(size_t frames, std::string* why);
  bool Handshake(uint8_t type, const void* data, size_t n, std::string* why);
  bool TakeHandshakeToken();
  void NoteLanding();  // frame 0 read: whether frame 1 may land (net/landing.h)
  void Reject(const std::string& why) const;

  ConnectionOwner* const owner_;
  const uint64_t id_;
  const int fd_;
  const std::string from_;
  ZmtpDecoder decoder_;
  bool proved_;
  bool over_budget_ = false;
  size_t unproved_frames_ = 0, unproved_bytes_ = 0;
  double tokens_ = kHandshakeBurst;
  std::chrono::steady_clock::time_point last_refill_;
  std::string out_;
  // The message being read: frames so far, and whether the last one said MORE.
  size_t index_ = 0;
  bool more_ = false;
  std::vector<WireFrame> frames_;        // proved: every frame, whole
  // Frame 1 of this message may land (its Meta answers a registered request), and the frame
  // being read is landing there.
  bool landing_ready_ = false, landing_reading_ = false;
  LandingKey landing_;
  int landing_dtype_ = 0;
  uint8_t first_[kMaxHandshakeBytes];    // unproved: the first frame's first bytes
  uint64_t first_size_ = 0;
  std::shared_ptr<ServerSession> session_;
  std::deque<std::string> confirmed_;    // client nonces of CONFIRMs taken on this connection
};

}  // namespace tally
