// Requests: a node's one way out for data, ps-lite's Customer: the outstanding requests of a
// node that asks others (the worker's kvstore channel, kvstore/dist_channel.h), and the
// answers of a node that is asked (the server's, server/run_server.cc: Post). It numbers requests, queues them in
// a SendQueue (net/send_queue.h: priority order within a send credit per receiver, sent from
// the caller's thread when nothing waits), gathers small ones to one receiver into one
// message, matches answers to the requests they complete, copies the parts of a pulled array
// into their destination, and lets the caller wait for one key or for everything.
//
//   Requests requests(cluster);                 // sends through the Cluster
//   requests.Start();
//   auto op = std::make_shared<PullOp>();       // where a key's pulled parts go
//   op->flat = out;
//   op->remaining = 1;
//   PendingRequest p;
//   p.command = wire::PULL;
//   p.key = 7;
//   p.pull = op;
//   p.length = out.numel();
//   requests.Send(server_id, std::move(pull), /*priority=*/-7, std::move(p));  // id filled in
//   // On the receive thread, for each RESPONSE m:
//   Requests::Answer a;
//   if (requests.Match(m, &a) && requests.CheckValues(m, a).ok()) {
//     for (size_t i = 0; i < a.ids.size(); ++i) requests.Complete(a, m, i);
//   }
//   TALLY_RETURN_IF_ERROR(requests.WaitKey(7, timeout_ms));  // op->flat holds the values
//
//   // A server answers through the same queue (no id of its own, no answer awaited):
//   Status s = requests.Post(worker_id, std::move(answer));  // by answer.meta.priority()
//
// Answers and requests share one queue, one credit per receiver and one sending thread: the
// first layers' weights a server answers overtake the last layers' queued behind a loaded
// link, as a worker's first layers' pulls do.
//
// Gathering: a small PUSH, PULL or PUSHPULL of one slice (64 KB at most) waiting for the
// sending thread leaves with the others queued for its receiver whose Meta is the same but
// for the slices, as one request of several slices (docs/wire.md, "Several slices in one
// request"): a round trip per server instead of one per key for a model's many small arrays.
// A small request sent from the caller's thread right after another (a burst) waits for the
// sending thread, so that the burst's next ones gather with it. The answer's slices are the
// requests', in order; Match hands them back by id.
//
// Per-key waits: a PUSH, PULL, PUSHPULL or ROLLBACK counts towards its key (WaitKey); every
// request towards WaitAll. Both return the job's failure (Fail, or the links' failure) at
// once; WaitAll also the first error a request finished with since its last call.
//
// A lost receiver (NodeLost): the requests queued for it or sent to it unanswered go where
// the reroute hook says (the same request ids, so that a server that got one counts it
// once) or are dropped, finished without error; requests sent to it later too. Resending
// needs the request itself: RequestOptions::keep_for_resend.
//
// Ownership: the caller keeps Requests alive while its hooks and the cluster's callbacks may
// call it. Thread-safety: every method may be called from any thread; the reroute hook runs
// with the layer's lock held and must not call back into it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "net/cluster.h"
#include "net/landing.h"
#include "net/send_queue.h"

namespace tally {

// A pull of one array in parts (one request per slice): each part's answer lands in `flat`
// (the destination seen as 1-D); once every part is in, `flat` is copied into `others`.
struct PullOp {
  Tensor flat;
  std::vector<Tensor> others;
  std::atomic<int> remaining{0};
};

// What a request's answer completes.
struct PendingRequest {
  wire::Command command = wire::COMMAND_UNKNOWN;
  uint64_t key = 0;
  int node = 0;                  // the receiver (Send fills it in)
  std::vector<Tensor> keep;      // the request's data frames, alive until answered
  std::shared_ptr<PullOp> pull;  // where answered values go (null: nowhere)
  int64_t offset = 0, length = 0;  // the part of pull->flat this request's answer fills
  Message request;               // the request itself, to send again (keep_for_resend)
  // For the reroute hook (kvstore/chain_router.h): a copy for a backup of a slice's server,
  // dropped if that server is lost; the rank of the server whose slice this is (-1: none),
  // whose chain's next server gets the request should its server be lost.
  bool replica_copy = false;
  int chain = -1;
  bool landing = false;  // its answer's values may be read straight into pull->flat (net/landing.h)
};

// The commands that carry data of one key, which WaitKey waits for.
bool IsKeyCommand(wire::Command c);

// How Requests reaches the job: a Cluster's (Of), or a test's.
struct RequestLinks {
  SendQueue::UnackedFn unacked;                        // Cluster::UnacknowledgedBytes
  std::function<Status(int node, Message&&)> send;     // Cluster::Send
  std::function<Status()> failure;                     // Cluster::failure: ok while healthy
  std::function<std::string(int node)> name;           // "server 2", for messages
  // This node's listening port and id, under which large pulls' answers are registered to
  // be read straight into their arrays (net/landing.h); 0: never.
  int landing_port = 0;
  int landing_node = -1;
  static RequestLinks Of(Cluster* cluster);
};

struct RequestOptions {
  std::string prefix = "kvstore";  // opens every message
  bool keep_for_resend = false;    // keep each request to send again (rerouting)
  int64_t credit = 1 << 20;        // unacknowledged bytes per receiver (SendCreditBytes)
};

class Requests {
 public:
  // A request to a lost node: true drops it; else *node is where it goes now (and
  // pending's fields may change). Runs with the layer's lock held.
  using RerouteFn = std::function<bool(PendingRequest* pending, int* node)>;

  // Sends through cluster with the credit SendCreditBytes(cluster->num_workers()) and wakes
  // on its acknowledgements. options.credit is ignored.
  Requests(Cluster* cluster, RequestOptions options, RerouteFn reroute);
  Requests(RequestLinks links, RequestOptions options, RerouteFn reroute);
  // Withdraws the landings of requests still unanswered: their arrays may go with the
  // caller, and a later job in this process may reuse the port, node id and request ids.
  ~Requests();

  // Starts the sending thread.
  void Start();
  // Sends what is queued, then ends the sending thread.
  void Stop();

  // Queues msg for `node`, its request id and priority filled in; higher priority first.
  // A failure to send finishes the request with an error (WaitAll reports it).
  void Send(int node, Message msg, int priority, PendingRequest pending);
  // Queues msg for `node` as it is: a message that is no request of this node's (an answer
  // to another's request, or one its receiver acknowledges by its own means, a server's
  // REPLICATE). No id is given and no answer awaited; it leaves by msg.meta.priority()
  // within the receiver's credit, at once from this thread when nothing waits, never
  // gathered, and NodeLost leaves it alone. Returns the failure of a send made now; one
  // made later by the sending thread is logged.
  Status Post(int node, Message msg);
  // Node `node` is lost: what is queued for it or unanswered by it goes where the reroute
  // hook says, or is dropped (finished). Returns how many were dropped.
  int NodeLost(int node);

  // One answer matched: the requests it completes, in slice order.
  struct Answer {
    std::vector<uint64_t> ids;
    std::vector<PendingRequest> requests;  // copies: views and pointers
    std::string what;                      // "PULL of key 3 and 2 more to server 1"
  };
  // Matches answer m to its requests; false (logged) when it names none outstanding.
  bool Match(const Message& m, Answer* a);
  // InvalidArgument when the answer carries an error (the request was refused), else Ok.
  Status Refusal(const Message& m, const Answer& a) const;
  // Whether m carries well-formed values for every request of a, slice by slice.
  Status CheckValues(const Message& m, const Answer& a) const;
  // Copies slice i of m into request i's part of its PullOp (when it has one; once all
  // parts are in, into the others too), then finishes the request. Returns the µs copying.
  int64_t Complete(const Answer& a, const Message& m, size_t i);
  void Finish(uint64_t id, const Status& s);
  void FinishAll(const Answer& a, const Status& s);
  // The job failed: every wait returns s (or Unavailable) from now on.
  void Fail(const Status& s);

  // Waits until every request sent so far is answered. Returns the job's failure, the first
  // error a request finished with since the last call, or Unavailable after timeout_ms.
  Status WaitAll(int timeout_ms);
  // Waits until every request for `key` sent so far (IsKeyCommand) is answered. Returns the
  // job's failure, or Unavailable after timeout_ms; errors are left for WaitAll.
  Status WaitKey(uint64_t key, int timeout_ms);
  // Requests neither answered nor dropped.
  size_t outstanding() const;

 private:
  void Gather(SendQueue::Item* first, std::vector<SendQueue::Item>* more);  // REQUIRES: mu() held
  Status Transmit(SendQueue::Item&& out);
  // The request ids an answer to request `id` completes: its own, or those gathered in it.
  std::vector<uint64_t> Gathered(uint64_t id);
  std::mutex& mu() const { return queue_.mu(); }
  // A request the reroute hook drops: true. REQUIRES: mu() held.
  bool Reroute(PendingRequest* p, int* node);
  // Registers where the answer to request `id` (msg) may land, when it is a large pull into
  // a host array of the answer's dtype.
  void MaybeLand(uint64_t id, const Message& msg, PendingRequest* p) const;
  LandingKey LandingOf(uint64_t id) const { return LandingKey{links_.landing_port, links_.landing_node, id}; }

  const RequestLinks links_;
  const RequestOptions options_;
  const RerouteFn reroute_;
  std::condition_variable done_cv_;  // pending_ emptied, a waited key done, or a failure
  std::map<uint64_t, PendingRequest> pending_;  // GUARDED_BY(mu())
  // Unanswered requests per key (IsKeyCommand), and the key WaitKey is waiting for (-1:
  // none), so that Finish wakes it only when that key is done.
  std::map<uint64_t, int> key_pending_;  // GUARDED_BY(mu())
  int64_t waited_key_ = -1;              // GUARDED_BY(mu())
  // Requests sent together: the id the message carries -> every id in it, in slice order.
  std::map<uint64_t, std::vector<uint64_t>> gathered_;  // GUARDED_BY(mu())
  std::set<int> lost_;                                   // GUARDED_BY(mu()): NodeLost's
  uint64_t next_id_ = 1;                                 // GUARDED_BY(mu())
  Status error_;                                         // GUARDED_BY(mu())
  Status failure_;                                       // GUARDED_BY(mu())
  // The last request Send sent itself: whether it was small, and when it had gone.
  bool last_direct_small_ = false;                          // GUARDED_BY(mu())
  std::chrono::steady_clock::time_point last_direct_end_;  // GUARDED_BY(mu())
  // Last: destroyed first, its sending thread ended while the hooks' state is alive.
  SendQueue queue_;
};

}  // namespace tally
