// The receiving end of the ZeroMQ transport: a TCP listener that speaks ZMTP 3.0 (NULL
// mechanism, as a ROUTER would) to the DEALER sockets of the job's nodes, and hands each
// whole message to the transport's Recv.
//
//   ZmtpReceiver::Options options;
//   options.responder = &responder;    // secure: connections must prove the secret; null: plain
//   options.rejected = &rejected;      // counts what it drops
//   std::unique_ptr<ZmtpReceiver> receiver;
//   int port = 0;
//   TALLY_RETURN_IF_ERROR(ZmtpReceiver::Start("127.0.0.1", 0, options, &receiver, &port));
//   ZmtpReceiver::Incoming in;
//   Status s = receiver->Take(&in, 1000);   // a whole message; Unavailable on timeout
//   if (s.ok() && in.session) s = in.session->Open(&in.frames);
//
// Why not ZeroMQ's ROUTER socket: ZeroMQ hands a multipart message to the application only
// once its last frame has arrived, keeping every frame before it in its own memory, and a
// ROUTER can neither bound the number of frames nor close one peer's connection. So a
// stranger sending frames with MORE set forever grew a node without bound. Here every
// connection that has not proved the job's secret is held to a budget (kUnprovedFrames
// frames, kUnprovedBytes bytes), keeps nothing but its first frame's first
// kMaxHandshakeBytes, and is closed past it; handshakes are answered on this receiver's own
// thread, rate-limited per connection, and create state only when a CONFIRM verifies
// (docs/security.md, "Strangers").
//
// Thread-safety: one thread of its own reads every connection and answers handshakes; Take
// is called by one thread at a time; Close by any, once the others are done with it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/secure_session.h"
#include "net/transport.h"

namespace tally {

// What a connection may send before it proves the secret: frames (every frame and ZMTP
// command after READY counts) and bytes read, greeting included. Past either, it is closed.
constexpr int kUnprovedFrames = 64;
constexpr size_t kUnprovedBytes = size_t{1} << 20;
// Connections that have not proved the secret, at most; a new one closes the oldest.
constexpr size_t kMaxUnprovedConnections = 256;
// HELLOs and CONFIRMs a connection may send: a burst of this many, then this many a second.
constexpr int kHandshakeBurst = 8;
constexpr int kHandshakesPerSecond = 4;
// Whole messages waiting for Take; past this the receiver stops reading proved connections
// (as ZeroMQ's receive high-water mark did) but goes on answering handshakes.
constexpr size_t kQueuedMessages = 1024;

class ZmtpReceiver {
 public:
  struct Options {
    Responder* responder = nullptr;         // null: plain, every connection is taken at its word
    size_t max_frame_bytes = kMaxFrameBytes;  // a larger frame closes its connection
    std::atomic<int64_t>* rejected = nullptr;  // messages dropped here (may be null)
  };
  // One whole message as it came from one connection.
  struct Incoming {
    std::vector<WireFrame> frames;
    std::shared_ptr<ServerSession> session;  // secure: its connection's session at the time; plain: null
    std::string from;                        // the connection's address, "10.0.0.2:41234"
  };
  // What the receiver did besides handing messages over, for the log line at Close.
  struct Counters {
    int64_t connections = 0, over_budget = 0, evicted = 0, rate_limited = 0, proved = 0;
  };

  // Binds host:port (an address literal: that interface; a name: all; port 0: a free one),
  // starts the receiving thread and sets *bound_port.
  static Status Start(const std::string& host, int port, const Options& options, std::unique_ptr<ZmtpReceiver>* out,
                      int* bound_port);
  virtual ~ZmtpReceiver() = default;
  // Waits up to timeout_ms (< 0: forever) for the next message.
  virtual Status Take(Incoming* in, int timeout_ms) = 0;
  virtual Counters counters() const = 0;
  // Stops the thread and closes every connection; Take then fails at once.
  virtual void Close() = 0;
};

}  // namespace tally
