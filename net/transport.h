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

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/node_ids.h"
#include "net/wire.pb.h"
#include "base/status.h"
#include "base/tensor.h"

namespace tally {

struct Message {
  wire::Meta meta;
  std::vector<Tensor> data;  // one per meta.slices(i): a 1-D tensor of meta.dtype, length elements
  // Received messages: who sent it, as authentication proved ("worker 3"); empty when the
  // job runs without authentication. Never taken from the message's own bytes.
  std::string peer;
};

// The bytes of a message's data frames.
size_t DataBytes(const Message& msg);

// Caps on what the wire may declare, checked before anything is allocated.
constexpr size_t kMaxMetaBytes = 16u << 20;       // one Meta
constexpr size_t kMaxFrameBytes = size_t{4} << 30;  // one data frame
constexpr int kMaxSlicesPerMessage = 1 << 16;

// Translations between the wire's dtype and the tensor dtype.
DType FromWire(wire::DType t);
wire::DType ToWire(DType t);  // REQUIRES: t is f32, f16 or bf16
// TWO_BIT and ONE_BIT: a push's packed bits (compress/compress.h), whose frames are bytes
// (FromWire gives u8), WireFrameElements(dtype, length) of them for a slice of length values.
bool IsPackedWireDType(wire::DType t);
uint64_t WireFrameElements(wire::DType t, uint64_t length);

// Checks a received Message: one data frame per slice, each of slice.length elements of the
// Meta's dtype (packed bits: WireFrameElements bytes, in pushes only). Returns a Status describing the first problem.
Status ValidateMessage(const Message& msg);

// One frame as it came off the wire: its bytes and what frees them (may be empty).
struct WireFrame {
  const void* data = nullptr;
  size_t size = 0;
  std::function<void()> release;
};

// Turns the frames of one received message (the Meta, then one frame per slice) into msg
// and validates it. Always takes the frames: on success the data frames become msg's
// tensors, without copying, and are released with them; on failure every frame is
// released at once. Never trusts the bytes: this is what the fuzzer drives.
Status DecodeMessage(std::vector<WireFrame> frames, Message* msg);

// What a transport has counted since it started: printed at exit, and by tests that
// require a healthy job to resend nothing.
struct TransportCounters {
  int64_t resent = 0;      // messages sent again, not acknowledged in time
  int64_t duplicates = 0;  // messages received again and dropped
  int64_t rejected = 0;    // messages dropped as malformed or unauthenticated
};
// "delivery: 0 messages resent, 0 duplicates dropped, 0 rejected": the line every node
// logs at exit.
std::string DescribeCounters(const TransportCounters& c);

class Transport {
 public:
  virtual ~Transport() = default;
  // Binds the receiving endpoint on host:port (port 0: the system picks a free one).
  virtual Status Bind(const std::string& host, int port, int* bound_port) = 0;
  // Opens the sending side to node `id` at host:port. Connecting again replaces the old one.
  // `peer` names the node ("server 1") when it is not the one its id implies (JobNames);
  // an authenticated transport proves the peer holds that name's key.
  virtual Status Connect(int id, const std::string& host, int port, const std::string& peer = "") = 0;
  // Queues msg for node `id`. Fails (never blocks for long) if the peer cannot take it
  // within the send timeout.
  virtual Status Send(int id, const Message& msg) = 0;
  // Waits up to timeout_ms (< 0: forever) for the next message. Unavailable on timeout.
  virtual Status Recv(Message* msg, int timeout_ms) = 0;
  // Messages sent but not yet acknowledged by their receivers (the reliable transport's
  // Recv takes the acknowledgements in); 0 for transports that do not track them.
  virtual size_t Unacknowledged() { return 0; }
  // Data bytes sent to node `id` and not yet acknowledged: what is still on its way in that
  // connection (the kvstore's send credit); 0 for transports that do not track them.
  virtual int64_t UnacknowledgedBytes(int id) { return 0; }
  // fn(id) is called, on the receiving thread, whenever acknowledgements from node `id` have
  // lowered UnacknowledgedBytes(id): what lets a sender held back by its credit go on at
  // once instead of looking again later. Replaces the previous one; null: none. Transports
  // that track no acknowledgements never call it.
  virtual void SetAckListener(std::function<void(int id)> fn) {}
  // Node `id` is a new process now (--elastic: a worker joined at a rank that left): what
  // was numbered, unacknowledged or owed between this node and the old one is dropped, and
  // both directions count from 1 again. Call it on the receiving thread, before anything
  // from the new process can arrive. No-op for transports that number nothing.
  virtual void Forget(int id) {}
  // Resends, duplicates and rejected messages so far, this transport's and those it wraps.
  virtual TransportCounters Counters() { return {}; }
  // Closes every socket; pending sends are dropped after the linger time.
  virtual void Close() = 0;
};

// The names of a job's nodes, which authentication proves: "scheduler", "server R",
// "worker R". Ids follow the node table (NodeIds, node_ids.h).
struct JobNames {
  int num_servers = 0, num_workers = 0, spare_servers = 0;
  NodeIds ids() const { return NodeIds{num_servers, num_workers, spare_servers}; }
  std::string Of(int id) const;  // empty for an id outside the job
  bool Has(const std::string& name) const;  // whether some node of the job has that name
  int size() const { return ids().size(); }
};
std::string NodeName(wire::Role role, int rank);

// Authentication and encryption (docs/security.md): per-connection AES-256-GCM keys are
// derived from the job's secret, both nodes' names and both ends' handshake nonces, so only
// members of the job can join, and every message proves which member sent it.
struct JobAuth {
  std::string secret;  // the job's secret, raw bytes (32)
  std::string self;    // this node's name
  JobNames job;
};

// The ZeroMQ transport (TCP). send_timeout_ms bounds how long a Send may wait for room, or,
// with auth, for the peer to answer the handshake. With auth, every message is sealed
// (docs/wire.md, "Secured messages"); one that fails authentication, or whose sender_id
// is not the node its connection proved, is dropped with a log line.
std::unique_ptr<Transport> NewZmqTransport(int send_timeout_ms = 5000, const JobAuth* auth = nullptr);

// Exactly-once, in-order delivery over a transport that may lose, repeat or reorder
// messages: numbers each message per receiver, acknowledges what arrives, resends what is
// not acknowledged within resend_ms, and drops repeats (docs/wire.md, "Delivery").
std::unique_ptr<Transport> NewReliableTransport(std::unique_ptr<Transport> inner, int resend_ms = 1000);

// Test-only fault injection on Send (TALLY_TEST_FAULTS, docs/faults.md):
//   "drop=0.01,dup=0.01,reorder=0.01,delay_ms=0-20,seed=3"
struct FaultSpec {
  double drop = 0, dup = 0, reorder = 0;
  int delay_min_ms = 0, delay_max_ms = 0;
  uint64_t seed = 1;
  bool any() const { return drop > 0 || dup > 0 || reorder > 0 || delay_max_ms > 0; }
  std::string ToString() const;
};
Status ParseFaultSpec(const std::string& text, FaultSpec* spec);
std::unique_ptr<Transport> NewFaultyTransport(std::unique_ptr<Transport> inner, const FaultSpec& spec);

// The in-process transport, for tests: endpoints are named host:port within the process
// and Send hands tensors over without copying or serialising the data frames (the Meta
// is serialised and parsed, as on the wire).
std::unique_ptr<Transport> NewInProcTransport();

}  // namespace tally
