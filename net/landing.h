// Landings: where the values answering a large pull are read from the socket straight into
// the array that asked for them (ps-lite's ZPull), instead of into a buffer of their own
// that the answer's handler then copies. The requesting side registers the destination of
// a request it is about to send; the receiving thread, having read an answer's Meta, claims
// it for that answer's one data frame when the frame has exactly the bytes and dtype
// registered, and reads the frame there.
//
//   const LandingKey key{port, node_id, request_id};    // the node's listening port and id
//   Landings::Get().Add(key, dst, bytes, wire::F32);    // before the request leaves
//   // receiving thread, the answer's Meta read (RESPONSE to request_id, one slice):
//   void* p = Landings::Get().Claim(key, frame_bytes, meta.dtype());  // null: not here
//   ... the frame read into p ...
//   Landings::Get().Landed(key);                        // the frame ended, or its connection did
//   // the requester, once the request is finished (answered, failed or dropped):
//   Landings::Get().Remove(key);                        // waits while a frame is being read there
//
// A landing is claimed at most once: a repeated answer (a resend, a duplicate) is read into
// a buffer of its own as before and dropped by delivery. A plain connection reads the
// frame there; a sealed answer's Meta record is opened first, then its data records are
// opened there (net/zmq_transport.cc, LandingPlace). Process-wide, because a node's receiver and
// its requests live in different layers; the listening port (unique in the process among
// live listeners) and the node's id keep nodes of several jobs in one process apart.
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

namespace tally {

struct LandingKey {
  int port = 0;          // the receiving node's listening port
  int node = -1;         // its node id (the answer's receiver_id)
  uint64_t request = 0;  // the request's id (the answer's request_id)
  bool operator<(const LandingKey& o) const {
    return std::tie(port, node, request) < std::tie(o.port, o.node, o.request);
  }
};

namespace wire {
class Meta;
}

// Whether an answer with Meta m (its receiver's listening port `port`) may land: a
// RESPONSE of one slice, without an error; *key: where it would.
bool AnswerMayLand(int port, const wire::Meta& m, LandingKey* key);

class Landings {
 public:
  static Landings& Get();

  // dst (bytes of wire dtype `dtype`) takes the answer to key's request.
  void Add(const LandingKey& key, void* dst, size_t bytes, int dtype);
  // Whether any landing is registered for `port`: the receiver reads an answer's Meta early
  // only then.
  bool Any(int port) const {
    return port > 0 && ports_with_landings_.load(std::memory_order_relaxed) != 0 && Count(port) > 0;
  }
  // The destination for a frame of `bytes` of wire dtype `dtype` answering key's request,
  // now claimed; null when none is registered, it was claimed before, or it differs.
  void* Claim(const LandingKey& key, size_t bytes, int dtype);
  // The claimed frame is read, or its connection closed before it was.
  void Landed(const LandingKey& key);
  // Forgets key's landing. wait: first waits (up to a minute, then logs) while a frame is
  // being read into it, so that nothing writes there once the requester moves on.
  void Remove(const LandingKey& key, bool wait = true);

  // Frames landed so far, for tests and the benchmark.
  int64_t landed() const { return landed_.load(std::memory_order_relaxed); }

 private:
  enum class State { kFree, kReading, kDone };
  struct Landing {
    void* dst = nullptr;
    size_t bytes = 0;
    int dtype = 0;
    State state = State::kFree;
    bool removed = false;  // removed without waiting: erase once landed
  };
  int64_t Count(int port) const;
  void EraseLocked(std::map<LandingKey, Landing>::iterator it);

  mutable std::mutex mu_;
  std::condition_variable landed_cv_;
  std::map<LandingKey, Landing> landings_;  // GUARDED_BY(mu_)
  std::map<int, int64_t> per_port_;         // GUARDED_BY(mu_)
  std::atomic<int64_t> ports_with_landings_{0};
  std::atomic<int64_t> landed_{0};
};

}  // namespace tally
