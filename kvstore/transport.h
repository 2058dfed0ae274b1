// Transport: moves Messages between the nodes of a job (ps-lite's Van).
//
//   std::unique_ptr<Transport> t = NewZmqTransport();
//   int port;
//   TALLY_RETURN_IF_ERROR(t->Bind("0.0.0.0", 0, &port));   // 0: any free port
//   TALLY_RETURN_IF_ERROR(t->Connect(peer_id, "10.0.0.2", 9091));
//   TALLY_RETURN_IF_ERROR(t->Send(peer_id, msg));
//   Message in;
//   Status s = t->Recv(&in, /*timeout_ms=*/1000);          // Unavailable on timeout
//
// A Message is one protobuf Meta (small: command, keys, sizes, ids) and one data frame per
// KeySlice of the Meta, holding the slice's values as raw little-endian bytes. Data tensors
// are sent without copying: the transport keeps a reference to their storage until the
// bytes are on their way, so the sender must not write them until the peer has answered.
// Received data frames arrive as tensors that own the received bytes (no copy).
//
// Every node binds one receiving endpoint and connects one sending socket per peer; all
// messages to a node arrive at its endpoint, in order per sender. Everything read from the
// wire is checked before use (sizes against caps, frame counts against the Meta), and a
// malformed message is dropped with a log line, never a crash.
//
// Thread-safety: Send may be called from several threads; Recv from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvstore/wire.pb.h"
#include "ops/status.h"
#include "ops/tensor.h"

namespace tally {

struct Message {
  wire::Meta meta;
  std::vector<Tensor> data;  // one per meta.slices(i): a 1-D tensor of meta.dtype, length elements
};

// Caps on what the wire may declare, checked before anything is allocated.
constexpr size_t kMaxMetaBytes = 16u << 20;       // one Meta
constexpr size_t kMaxFrameBytes = size_t{4} << 30;  // one data frame
constexpr int kMaxSlicesPerMessage = 1 << 16;

// Translations between the wire's dtype and the tensor dtype.
DType FromWire(wire::DType t);
wire::DType ToWire(DType t);  // REQUIRES: t is f32, f16 or bf16

// Checks a received Message: one data frame per slice, each of slice.length elements of the
// Meta's dtype. Returns a Status describing the first problem.
Status ValidateMessage(const Message& msg);

class Transport {
 public:
  virtual ~Transport() = default;
  // Binds the receiving endpoint on host:port (port 0: the system picks a free one).
  virtual Status Bind(const std::string& host, int port, int* bound_port) = 0;
  // Opens the sending side to node `id` at host:port. Connecting again replaces the old one.
  virtual Status Connect(int id, const std::string& host, int port) = 0;
  // Queues msg for node `id`. Fails (never blocks for long) if the peer cannot take it
  // within the send timeout.
  virtual Status Send(int id, const Message& msg) = 0;
  // Waits up to timeout_ms (< 0: forever) for the next message. Unavailable on timeout.
  virtual Status Recv(Message* msg, int timeout_ms) = 0;
  // Closes every socket; pending sends are dropped after the linger time.
  virtual void Close() = 0;
};

// The ZeroMQ transport (TCP). send_timeout_ms bounds how long a Send may wait for room.
std::unique_ptr<Transport> NewZmqTransport(int send_timeout_ms = 5000);

// The in-process transport, for tests: endpoints are named host:port within the process
// and Send hands tensors over without copying or serialising the data frames (the Meta
// is serialised and parsed, as on the wire).
std::unique_ptr<Transport> NewInProcTransport();

}  // namespace tally
