#include "net/requests.h"

#include <chrono>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "profile/trace.h"

namespace tally {

namespace {

// What may be gathered: requests of at most this many bytes each way, up to this many in
// one message and this many bytes in all. Larger requests gain nothing from company, and
// a large gathered message would hold back its first slices' answers.
constexpr int64_t kGatherBytes = 64 << 10;
constexpr int kGatherSlices = 64;
constexpr int64_t kGatherTotal = 256 << 10;
// Requests sent from the caller's thread less than this apart make a burst.
constexpr auto kBurstGap = std::chrono::microseconds(100);

// A request's bytes each way at most (a PULL sends none but is answered with its values):
// its slice's values at 4 bytes, the widest dtype.
int64_t SliceBytes(const Message& m) {
  int64_t n = 0;
  for (const wire::KeySlice& s : m.meta.slices()) n += static_cast<int64_t>(s.length()) * 4;
  return n;
}

// What the Gather hook gets at once, from the queue.
SendQueue::GatherLimits GatherLimits() {
  SendQueue::GatherLimits g;
  g.max_items = kGatherSlices;
  g.max_bytes = kGatherTotal;
  return g;
}

bool Gatherable(const Message& m) {
  const wire::Command c = m.meta.command();
  return (c == wire::PUSH || c == wire::PULL || c == wire::PUSHPULL) && m.meta.slices_size() == 1 &&
         SliceBytes(m) <= kGatherBytes;
}

// The Meta without what differs between requests that may travel together.
std::string Shared(const wire::Meta& meta) {
  wire::Meta m = meta;
  m.clear_slices();
  m.clear_request_id();
  m.clear_priority();
  return m.SerializeAsString();
}

RequestOptions WithCredit(RequestOptions o, int64_t credit) {
  o.credit = credit;
  return o;
}

}  // namespace

bool IsKeyCommand(wire::Command c) {
  return c == wire::PUSH || c == wire::PULL || c == wire::PUSHPULL || c == wire::ROLLBACK;
}

RequestLinks RequestLinks::Of(Cluster* cluster) {
  RequestLinks l;
  l.unacked = [cluster](int node) { return cluster->UnacknowledgedBytes(node); };
  l.send = [cluster](int node, Message&& m) { return cluster->Send(node, std::move(m)); };
  l.failure = [cluster] { return cluster->failure(); };
  l.name = [cluster](int node) { return "server " + std::to_string(cluster->ids().ServerRank(node)); };
  l.landing_port = cluster->me().port();
  l.landing_node = cluster->me().id();
  return l;
}

Requests::Requests(Cluster* cluster, RequestOptions options, RerouteFn reroute)
    : Requests(RequestLinks::Of(cluster), WithCredit(std::move(options), SendCreditBytes(cluster->num_workers())),
               std::move(reroute)) {
  queue_.WakeOnAcknowledgements(cluster);
}

Requests::Requests(RequestLinks links, RequestOptions options, RerouteFn reroute)
    : links_(std::move(links)),
      options_(std::move(options)),
      reroute_(std::move(reroute)),
      queue_(
          links_.unacked, options_.credit, [this](SendQueue::Item&& out) { return Transmit(std::move(out)); },
          [this](SendQueue::Item* first, std::vector<SendQueue::Item>* more) { Gather(first, more); },
          GatherLimits(), "sender") {}

Requests::~Requests() {
  std::vector<uint64_t> landed;
  {
    std::lock_guard<std::mutex> l(mu());
    for (const auto& [id, p] : pending_) {
      if (p.landing) landed.push_back(id);
    }
  }
  for (uint64_t id : landed) Landings::Get().Remove(LandingOf(id));
}

void Requests::Start() { queue_.Start(); }

void Requests::Stop() { queue_.Stop(); }

bool Requests::Reroute(PendingRequest* p, int* node) { return reroute_ == nullptr || reroute_(p, node); }

void Requests::Send(int node, Message msg, int priority, PendingRequest pending) {
  std::unique_lock<std::mutex> l(mu());
  const uint64_t id = next_id_++;
  msg.meta.set_request_id(id);
  msg.meta.set_priority(priority);
  if (lost_.count(node) && Reroute(&pending, &node)) return;
  msg.meta.set_receiver_id(node);
  pending.node = node;
  MaybeLand(id, msg, &pending);
  if (options_.keep_for_resend) pending.request = msg;
  if (IsKeyCommand(pending.command)) ++key_pending_[pending.key];
  pending_[id] = std::move(pending);
  // A small request right after another sent from here, that one still unanswered, is
  // likely one of a burst (a model's arrays, key after key): it waits for the sending
  // thread, which gathers what the burst adds meanwhile. One request at a time (a round
  // trip each) goes at once.
  const bool gatherable = Gatherable(msg);
  const bool burst = gatherable && last_direct_small_ && pending_.size() > 1 &&
                     std::chrono::steady_clock::now() - last_direct_end_ < kBurstGap;
  SendQueue::Item item;
  item.node = node;
  if (gatherable) {
    item.group = Shared(msg.meta);
    item.gather_bytes = SliceBytes(msg);
  }
  item.msg = std::move(msg);
  bool sent_now = false;
  queue_.Send(l, std::move(item), priority, /*may_go_now=*/!burst, &sent_now);  // a failure finishes the request
  if (sent_now) {
    last_direct_small_ = gatherable;
    last_direct_end_ = std::chrono::steady_clock::now();
  }
}

void Requests::MaybeLand(uint64_t id, const Message& msg, PendingRequest* p) const {
  const wire::Command c = p->command;
  if (links_.landing_port <= 0 || p->pull == nullptr || (c != wire::PULL && c != wire::PUSHPULL)) return;
  const Tensor& flat = p->pull->flat;
  // Small requests may be gathered, their answers several frames to one id: never landed.
  if (msg.meta.slices_size() != 1 || Gatherable(msg) || !flat.defined() || !flat.device().is_cpu() ||
      (flat.dtype() != DType::kF32 && flat.dtype() != DType::kF16 && flat.dtype() != DType::kBF16) ||
      msg.meta.pull_dtype() != ToWire(flat.dtype()) || p->length <= 0 ||
      p->offset < 0 || p->offset + p->length > flat.numel()) {
    return;
  }
  const Tensor dst = flat.Slice(p->offset, p->offset + p->length);
  Landings::Get().Add(LandingOf(id), dst.raw_data(), dst.nbytes(), static_cast<int>(ToWire(flat.dtype())));
  p->landing = true;
}

Status Requests::Post(int node, Message msg) {
  SendQueue::Item item;
  item.node = node;
  item.posted = true;
  const int priority = msg.meta.priority();
  item.msg = std::move(msg);
  std::unique_lock<std::mutex> l(mu());
  return queue_.Send(l, std::move(item), priority);
}

void Requests::Gather(SendQueue::Item* first, std::vector<SendQueue::Item>* more) {
  std::vector<uint64_t> ids{first->msg.meta.request_id()};
  for (SendQueue::Item& item : *more) {
    Message& m = item.msg;
    *first->msg.meta.add_slices() = m.meta.slices(0);
    for (Tensor& t : m.data) first->msg.data.push_back(std::move(t));
    ids.push_back(m.meta.request_id());
  }
  gathered_[ids[0]] = std::move(ids);
}

std::vector<uint64_t> Requests::Gathered(uint64_t id) {
  std::lock_guard<std::mutex> l(mu());
  auto it = gathered_.find(id);
  if (it == gathered_.end()) return {id};
  std::vector<uint64_t> ids = std::move(it->second);
  gathered_.erase(it);
  return ids;
}

Status Requests::Transmit(SendQueue::Item&& out) {
  // Not a request of this node's: nothing to finish, and the queue logs a failure.
  if (out.posted) return links_.send(out.node, std::move(out.msg));
  const uint64_t id = out.msg.meta.request_id();
  const wire::Command command = out.msg.meta.command();
  profile::Tracer& tracer = profile::Tracer::Get();
  const int64_t t0 = tracer.enabled() ? profile::NowUs() : 0;
  const double key = out.msg.meta.slices_size() > 0 ? static_cast<double>(out.msg.meta.slices(0).key()) : -1;
  const int64_t bytes = static_cast<int64_t>(DataBytes(out.msg));
  const int node = out.node;
  Status s = links_.send(node, std::move(out.msg));
  if (t0 != 0) {
    tracer.Complete(wire::Command_Name(command).c_str(), "comm", t0, profile::NowUs() - t0, "key", key, "bytes",
                    static_cast<double>(bytes));
  }
  if (!s.ok()) {
    const Status failed = Status::Unavailable(options_.prefix + ": sending " + wire::Command_Name(command) + " to " +
                                              links_.name(node) + ": " + s.message());
    for (uint64_t gathered : Gathered(id)) Finish(gathered, failed);
  }
  return Status::Ok();  // the failure is its requests'
}

void Requests::Finish(uint64_t id, const Status& s) {
  bool wake_waiters = false;
  bool landing = false;
  {
    std::lock_guard<std::mutex> l(mu());
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    landing = it->second.landing;
    bool key_done = false;
    if (IsKeyCommand(it->second.command)) {
      auto k = key_pending_.find(it->second.key);
      if (--k->second == 0) {
        key_done = static_cast<int64_t>(k->first) == waited_key_;
        key_pending_.erase(k);
      }
    }
    pending_.erase(it);
    if (!s.ok() && error_.ok()) error_ = s;
    // WaitAll waits for all of them and WaitKey for one key: waking them for every answer
    // would cost a context switch per key.
    wake_waiters = pending_.empty() || key_done;
  }
  // Before the waiter moves on: nothing may be read into its array afterwards.
  if (landing) Landings::Get().Remove(LandingOf(id));
  if (wake_waiters) done_cv_.notify_all();
}

void Requests::FinishAll(const Answer& a, const Status& s) {
  for (uint64_t id : a.ids) Finish(id, s);
}

int Requests::NodeLost(int node) {
  std::vector<uint64_t> dropped;
  {
    std::lock_guard<std::mutex> l(mu());
    lost_.insert(node);
    std::set<uint64_t> queued;
    queue_.Filter([&](SendQueue::Item* out) {
      const uint64_t id = out->msg.meta.request_id();
      if (out->posted) return true;
      auto p = pending_.find(id);
      if (out->node != node || p == pending_.end()) return true;
      queued.insert(id);
      if (p->second.landing) Landings::Get().Remove(LandingOf(id), /*wait=*/false);  // its slice may change
      if (Reroute(&p->second, &out->node)) {
        dropped.push_back(id);
        return false;
      }
      p->second.node = out->node;
      out->msg.meta.set_receiver_id(out->node);
      return true;
    });
    // Sent and unanswered: the answers will never come; each request goes again on its own.
    for (auto& [id, p] : pending_) {
      if (p.node != node || queued.count(id)) continue;
      gathered_.erase(id);
      if (p.landing) Landings::Get().Remove(LandingOf(id), /*wait=*/false);
      int to = node;
      if (Reroute(&p, &to)) {
        dropped.push_back(id);
        continue;
      }
      p.node = to;
      SendQueue::Item again;
      again.node = to;
      again.msg = p.request;
      again.msg.meta.set_receiver_id(to);
      const int priority = again.msg.meta.priority();
      queue_.Enqueue(std::move(again), priority);
    }
  }
  for (uint64_t id : dropped) Finish(id, Status::Ok());
  queue_.Wake();
  return static_cast<int>(dropped.size());
}

bool Requests::Match(const Message& m, Answer* a) {
  const wire::Meta& meta = m.meta;
  a->ids = Gathered(meta.request_id());
  a->requests.clear();
  {
    std::lock_guard<std::mutex> l(mu());
    for (uint64_t id : a->ids) {
      auto it = pending_.find(id);
      if (it == pending_.end()) {
        LOG(WARNING) << options_.prefix << ": ignoring an answer to unknown request " << id << " from node "
                     << meta.sender_id();
        return false;
      }
      a->requests.push_back(it->second);  // copies views and pointers only
    }
  }
  const PendingRequest& first = a->requests[0];
  a->what = wire::Command_Name(first.command) + " of key " + std::to_string(first.key) +
            (a->ids.size() > 1 ? " and " + std::to_string(a->ids.size() - 1) + " more" : "") + " to " +
            links_.name(first.node);
  return true;
}

Status Requests::Refusal(const Message& m, const Answer& a) const {
  if (m.meta.error().empty()) return Status::Ok();
  return Status::InvalidArgument(options_.prefix + ": " + a.what + " refused: " + m.meta.error());
}

Status Requests::CheckValues(const Message& m, const Answer& a) const {
  const wire::Meta& meta = m.meta;
  Status s = ValidateMessage(m);
  if (s.ok() && static_cast<size_t>(meta.slices_size()) != a.ids.size()) {
    s = Status::Internal("a slice count unlike the request's");
  }
  for (size_t i = 0; s.ok() && i < a.ids.size(); ++i) {
    if (static_cast<int64_t>(meta.slices(i).length()) != a.requests[i].length ||
        static_cast<int64_t>(meta.slices(i).offset()) != a.requests[i].offset) {
      s = Status::Internal("the answer's slices do not match the request");
    }
  }
  if (s.ok()) return s;
  return Status::Internal(options_.prefix + ": answer to " + a.what + ": " + s.message());
}

int64_t Requests::Complete(const Answer& a, const Message& m, size_t i) {
  const PendingRequest& p = a.requests[i];
  if (p.pull == nullptr) {  // nowhere to write (a ROLLBACK of a key never pulled)
    Finish(a.ids[i], Status::Ok());
    return 0;
  }
  // Copied on this thread, outside the lock: the caller's thread waits meanwhile; a landed
  // frame (net/landing.h) is there already.
  const int64_t t0 = profile::NowUs();
  Tensor dst = p.pull->flat.Slice(p.offset, p.offset + p.length);
  if (dst.raw_data() != m.data[i].raw_data()) dst.CopyFrom(m.data[i]);
  if (p.pull->remaining.fetch_sub(1) == 1) {
    for (Tensor& o : p.pull->others) o.CopyFrom(p.pull->flat);
  }
  const int64_t dur = profile::NowUs() - t0;
  profile::Tracer::Get().Complete("pull", "comm", t0, dur, "key", static_cast<double>(p.key), "bytes",
                                  static_cast<double>(m.data[i].nbytes()));
  Finish(a.ids[i], Status::Ok());
  return dur;
}

void Requests::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu());
    if (failure_.ok()) failure_ = s.ok() ? Status::Unavailable("the job failed") : s;
  }
  done_cv_.notify_all();
}

Status Requests::WaitKey(uint64_t key, int timeout_ms) {
  const Status job_failure = links_.failure();
  if (!job_failure.ok()) Fail(job_failure);
  std::unique_lock<std::mutex> l(mu());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  waited_key_ = static_cast<int64_t>(key);
  while (key_pending_.count(key) && failure_.ok()) {
    if (done_cv_.wait_until(l, deadline) == std::cv_status::timeout && key_pending_.count(key) && failure_.ok()) {
      waited_key_ = -1;
      return Status::Unavailable(options_.prefix + ": key " + std::to_string(key) + " unanswered after " +
                                 std::to_string(timeout_ms) + " ms");
    }
  }
  waited_key_ = -1;
  return failure_;
}

Status Requests::WaitAll(int timeout_ms) {
  const Status job_failure = links_.failure();
  if (!job_failure.ok()) Fail(job_failure);
  std::unique_lock<std::mutex> l(mu());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pending_.empty() && failure_.ok()) {
    if (done_cv_.wait_until(l, deadline) == std::cv_status::timeout && !pending_.empty() && failure_.ok()) {
      const PendingRequest& first = pending_.begin()->second;
      return Status::Unavailable(options_.prefix + ": " + std::to_string(pending_.size()) +
                                 " requests unanswered after " + std::to_string(timeout_ms) +
                                 " ms (the oldest: " + wire::Command_Name(first.command) + " of key " +
                                 std::to_string(first.key) + " to " + links_.name(first.node) + ")");
    }
  }
  if (!failure_.ok()) return failure_;
  Status e = error_;
  error_ = Status::Ok();
  return e;
}

size_t Requests::outstanding() const {
  std::lock_guard<std::mutex> l(mu());
  return pending_.size();
}

}  // namespace tally
