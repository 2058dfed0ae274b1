// Cluster membership of a server or worker. Three threads: the caller's, a receive thread
// that handles membership messages and hands data messages to the handler, and a heartbeat
// thread that beats to the scheduler and watches that the scheduler still beats back.
#include "net/cluster.h"

#include "net/command_rules.h"
#include "profile/trace.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace tally {

using Clock = std::chrono::steady_clock;

class Cluster::Impl {
 public:
  Impl(const ClusterConfig& cfg, std::unique_ptr<Transport> transport)
      : cfg_(cfg), transport_(std::move(transport)) {
    transport_->SetAckListener([this](int id) {
      std::lock_guard<std::mutex> lock(ack_mu_);
      for (const auto& [key, fn] : ack_listeners_) fn(id);
    });
  }

  ~Impl() {
    transport_->SetAckListener(nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
    if (receiver_.joinable()) receiver_.join();
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      queue_stop_ = true;
    }
    queue_cv_.notify_all();
    if (handle_.joinable()) handle_.join();
    LOG(INFO) << DescribeCounters(transport_->Counters());
    const std::string refused = DescribeRefused();
    if (!refused.empty()) LOG(WARNING) << refused;
    transport_->Close();
  }

  Status Join() {
    int port = 0;
    TALLY_RETURN_IF_ERROR(transport_->Bind(cfg_.host, cfg_.port, &port));
    TALLY_RETURN_IF_ERROR(transport_->Connect(0, cfg_.scheduler_host, cfg_.scheduler_port));
    Message reg;
    reg.meta.set_command(wire::REGISTER);
    reg.meta.set_sender_id(-1);  // no id until the node table comes
    wire::Node* n = reg.meta.add_nodes();
    n->set_role(cfg_.role);
    n->set_rank(cfg_.rank);
    n->set_host(cfg_.host);
    n->set_port(port);
    n->set_pid(static_cast<int>(getpid()));
    if (cfg_.can_join) reg.meta.set_membership_epoch(1);  // it can join a running job
    last_heard_ = Clock::now();
    handle_ = std::thread([this] { HandleLoop(); });
    receiver_ = std::thread([this] { ReceiveLoop(); });

    // REGISTER is the one message sent before this node has an id, so the transport cannot
    // number it and resend it: it is sent again every second until the table comes (the
    // scheduler ignores repeats).
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.register_timeout_ms);
    std::unique_lock<std::mutex> lock(mu_);
    bool ready = false;
    while (!ready && failure_.ok() && Clock::now() < deadline) {
      lock.unlock();
      Status sent = transport_->Send(0, reg);
      lock.lock();
      if (!sent.ok()) {
        LOG_EVERY_N(WARNING, 10) << "register with the scheduler: " << sent.message();
      }
      ready = cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::seconds(1)),
                             [&] { return !nodes_.empty() || !failure_.ok(); });
    }
    if (!failure_.ok()) return failure_;
    if (!ready) {
      return Status::Unavailable("the scheduler at " + cfg_.scheduler_host + ":" + std::to_string(cfg_.scheduler_port) +
                                 " did not answer within " + std::to_string(cfg_.register_timeout_ms) +
                                 " ms (TALLY_REGISTER_TIMEOUT_MS); is it running, did every node start" +
                                 (cfg_.job_secret.empty() ? std::string("?")
                                                          : ", and does this process have the job's secret?"));
    }
    for (const wire::Node& node : nodes_) {
      if (node.id() == 0 || node.id() == me_.id()) continue;
      TALLY_RETURN_IF_ERROR(transport_->Connect(node.id(), node.host(), node.port()));
    }
    lock.unlock();
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    LOG(INFO) << "joined the job as " << DescribeNode(me_) << ": " << cfg_.num_workers << " workers, "
              << cfg_.num_servers << " servers";
    return Status::Ok();
  }

  const wire::Node& me() const { return me_; }
  int64_t joined_after_epoch() const { return joined_after_epoch_; }
  wire::Node node(int id) const {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(id >= 0 && id < static_cast<int>(nodes_.size())) << "no node " << id;
    return nodes_[id];
  }
  int num_workers() const { return cfg_.num_workers; }
  int num_servers() const { return cfg_.num_servers; }
  int spare_servers() const { return cfg_.spare_servers; }
  NodeIds ids() const { return NodeIds{cfg_.num_servers, cfg_.num_workers, cfg_.spare_servers}; }

  int64_t refused() const {
    std::lock_guard<std::mutex> lock(refused_mu_);
    return refused_total_;
  }

  void SetDataHandler(std::function<void(Message&&)> handler) {
    std::deque<Message> waiting;
    {
      std::lock_guard<std::mutex> lock(handler_mu_);
      handler_ = std::move(handler);
      waiting.swap(early_);
      for (Message& m : waiting) handler_(std::move(m));
    }
  }

  Status Send(int id, Message msg) {
    msg.meta.set_sender_id(me_.id());
    msg.meta.set_receiver_id(id);
    return transport_->Send(id, msg);
  }

  Status Barrier(uint32_t group, int timeout_ms) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation = barrier_done_[group];
    }
    Message m;
    m.meta.set_command(wire::BARRIER);
    m.meta.set_barrier_group(group);
    TALLY_RETURN_IF_ERROR(Send(0, std::move(m)));
    std::unique_lock<std::mutex> lock(mu_);
    bool done = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
      return barrier_done_[group] > generation || !failure_.ok();
    });
    if (!failure_.ok()) return failure_;
    if (!done) return Status::Unavailable("barrier of group " + std::to_string(group) + " not reached within " + std::to_string(timeout_ms) + " ms");
    return Status::Ok();
  }

  Status Finish(int timeout_ms, int64_t steps) {
    Message m;
    m.meta.set_command(wire::WORKER_DONE);
    m.meta.set_step(steps);
    TALLY_RETURN_IF_ERROR(Send(0, std::move(m)));
    std::unique_lock<std::mutex> lock(mu_);
    bool done = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return shutdown_ || !failure_.ok(); });
    if (!failure_.ok()) return failure_;
    if (!done) return Status::Unavailable("no shutdown from the scheduler within " + std::to_string(timeout_ms) + " ms");
    return Status::Ok();
  }

  Status WaitForShutdown() {
    std::unique_lock<std::mutex> lock(mu_);
    // No timeout needed: the heartbeat thread turns a silent scheduler into a failure.
    cv_.wait(lock, [&] { return shutdown_ || !failure_.ok(); });
    return failure_;
  }

  int64_t UnacknowledgedBytes(int id) const { return transport_->UnacknowledgedBytes(id); }
  int AddAckListener(std::function<void(int id)> fn) {
    std::lock_guard<std::mutex> lock(ack_mu_);
    ack_listeners_[next_ack_key_] = std::move(fn);
    return next_ack_key_++;
  }
  void RemoveAckListener(int key) {
    std::lock_guard<std::mutex> lock(ack_mu_);  // also waits for a call in progress
    ack_listeners_.erase(key);
  }
  Status failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

  void OnFailure(std::function<void(const Status&)> callback) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      Status f = failure_;
      lock.unlock();
      callback(f);
      return;
    }
    failure_callbacks_.push_back(std::move(callback));
  }

 private:
  // Records the first failure, wakes every waiter, and arms the watchdog.
  void Fail(const Status& why) {
    std::vector<std::function<void(const Status&)>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok() || shutdown_) return;
      failure_ = why;
      callbacks.swap(failure_callbacks_);
    }
    LOG(ERROR) << DescribeNode(me_) << ": " << why.message();
    cv_.notify_all();
    for (auto& cb : callbacks) cb(why);
    const int grace = cfg_.exit_grace_ms;
    if (grace < 0) return;
    std::thread([grace, why] {
      std::this_thread::sleep_for(std::chrono::milliseconds(grace));
      LOG(ERROR) << "exiting: " << why.message();
      std::fflush(nullptr);
      std::_Exit(1);
    }).detach();
  }

  void ReceiveLoop() {
    profile::Tracer::Get().NameThread("receive");
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      Message m;
      if (!transport_->Recv(&m, 100).ok()) continue;
      // Authentication proved who sent it; whether that node may say it is decided here,
      // before anything is applied: a member's SHUTDOWN or a stranger id's ends nothing.
      Status allowed = CheckCommandSender(ids(), cfg_.role, m.meta);
      if (allowed.ok()) allowed = CheckNoticeFields(ids(), m.meta);
      if (!allowed.ok()) {
        Refuse(m, allowed);
        continue;
      }
      if (m.meta.sender_id() == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        last_heard_ = Clock::now();
      }
      const wire::Command c = m.meta.command();
      if (c == wire::MEMBERSHIP_PREPARE || c == wire::MEMBERSHIP) ConnectJoined(m.meta);
      switch (m.meta.command()) {
        case wire::NODE_TABLE: HandleNodeTable(m); break;
        case wire::BARRIER_DONE: {
          std::lock_guard<std::mutex> lock(mu_);
          ++barrier_done_[m.meta.barrier_group()];
          cv_.notify_all();
          break;
        }
        case wire::HEARTBEAT:
          if (m.meta.clock_echo_us() != 0) AddClockSample(m.meta);
          break;
        case wire::SHUTDOWN:
          if (!m.meta.error().empty()) {
            Fail(Status::Unavailable("the scheduler ended the job: " + m.meta.error()));
          } else {
            std::lock_guard<std::mutex> lock(mu_);
            shutdown_ = true;
            cv_.notify_all();
          }
          break;
        case wire::NODE_DEAD: {
          std::string who;
          for (int i = 0; i < m.meta.nodes_size(); ++i) {
            who += (i == 0 ? "" : i + 1 == m.meta.nodes_size() ? " and " : ", ") + DescribeNode(m.meta.nodes(i));
          }
          Fail(Status::Unavailable((who.empty() ? std::string("a node") : who) + " stopped answering; " +
                                   (m.meta.error().empty() ? "" : m.meta.error() + "; ") + "the scheduler ended the job"));
          break;
        }
        case wire::SERVER_LOST:
          // To the data handler, in order with the data: a server stops waiting for the lost
          // one there, a worker sends its requests elsewhere.
          // nodes[1], when present, is the spare that takes the lost server's place.
          if (ServerLost(m.meta)) Deliver(std::move(m));
          break;
        default: Deliver(std::move(m));
      }
    }
  }

  // --elastic: a worker that joined is a new process at its rank's id (scheduler/join.h),
  // named with its address by MEMBERSHIP_PREPARE (to the servers, before the joiner may
  // send them anything) and MEMBERSHIP: this node forgets the old process's numbering and
  // connects to the new one. Runs on the receiving thread, as Transport::Forget wants.
  void ConnectJoined(const wire::Meta& meta) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const wire::Node& n : meta.nodes()) {
      const int id = ids().Worker(n.rank());
      if (id == me_.id() || id >= static_cast<int>(nodes_.size())) continue;
      wire::Node& known = nodes_[id];
      if (known.pid() == n.pid() && known.port() == n.port() && known.host() == n.host()) continue;
      known = n;
      known.set_id(id);
      transport_->Forget(id);
      Status s = transport_->Connect(id, n.host(), n.port());
      LOG(INFO) << DescribeNode(known) << " joined the job" << (s.ok() ? "" : "; connecting to it: " + s.message());
    }
  }

  // A message its sender may not send: logged (the first ones, then one in 1000, so that a
  // flood cannot fill the disk) and counted by command, never applied.
  void Refuse(const Message& m, const Status& why) {
    int64_t n = 0;
    {
      std::lock_guard<std::mutex> lock(refused_mu_);
      ++refused_[m.meta.command()];
      n = ++refused_total_;
    }
    if (LogsRefusal(n)) {
      LOG(WARNING) << "refused " << why.message() << (m.peer.empty() ? "" : ", authenticated as " + m.peer) << " ("
                   << n << " refused so far)";
    }
  }

  // "refused 3 messages that their senders may not send: SHUTDOWN 2, NODE_DEAD 1", or
  // empty when none was.
  std::string DescribeRefused() const {
    std::lock_guard<std::mutex> lock(refused_mu_);
    if (refused_.empty()) return "";
    std::string each;
    for (const auto& [command, count] : refused_) {
      each += (each.empty() ? "" : ", ") +
              (wire::Command_IsValid(command) ? wire::Command_Name(static_cast<wire::Command>(command))
                                              : "command " + std::to_string(command)) +
              " " + std::to_string(count);
    }
    return "refused " + std::to_string(refused_total_) + " messages that their senders may not send: " + each;
  }

  // Records a lost server; false when it was known already.
  bool ServerLost(const wire::Meta& meta) {
    const wire::Node& node = meta.nodes(0);
    bool idle_spare;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!lost_servers_.insert(node.rank()).second) return false;
      if (meta.nodes_size() > 1) placed_spares_.insert(meta.nodes(1).rank());
      idle_spare = node.rank() >= cfg_.num_servers && !placed_spares_.count(node.rank());
    }
    if (idle_spare) {
      LOG(WARNING) << "spare " << DescribeNode(node) << " stopped answering; it held nothing";
      return true;
    }
    LOG(WARNING) << DescribeNode(node) << " stopped answering; its slices go on on their replicas "
                 << "(--server-replicas " << cfg_.server_replicas << ")"
                 << (meta.nodes_size() > 1 ? "; spare " + DescribeNode(meta.nodes(1)) + " takes its place" : "");
    return true;
  }

  // One round trip: sent at t0 (echoed), answered at t1 on the scheduler's clock, back at
  // t2. Assuming equal delays both ways, the scheduler read t1 at our (t0 + t2) / 2.
  void AddClockSample(const wire::Meta& meta) {
    const int64_t t2 = profile::NowUs();
    const int64_t t0 = meta.clock_echo_us();
    if (t2 < t0) return;
    std::lock_guard<std::mutex> lock(mu_);
    clock_samples_.push_back({meta.clock_us() - (t0 + t2) / 2, t2 - t0});
    if (clock_samples_.size() > 64) clock_samples_.pop_front();
  }

 public:
  bool ServerAlive(int rank) const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_servers_.count(rank) == 0;
  }
  int server_replicas() const { return cfg_.server_replicas; }

  bool ClockOffset(int64_t* offset_us, int64_t* rtt_us) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (clock_samples_.empty()) return false;
    const ClockSample* best = &clock_samples_.front();
    for (const ClockSample& c : clock_samples_) {
      if (c.rtt_us < best->rtt_us) best = &c;
    }
    *offset_us = best->offset_us;
    *rtt_us = best->rtt_us;
    return true;
  }

 private:
  void HandleNodeTable(const Message& m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!nodes_.empty()) return;
    std::vector<wire::Node> nodes(m.meta.nodes_size());
    for (const wire::Node& n : m.meta.nodes()) {
      if (n.id() < 0 || n.id() >= m.meta.nodes_size()) {
        LOG(WARNING) << "node table with a bad id " << n.id();
        return;
      }
      nodes[n.id()] = n;
    }
    const int me = m.meta.receiver_id();
    if (me <= 0 || me >= static_cast<int>(nodes.size())) {
      LOG(WARNING) << "node table without this node";
      return;
    }
    me_ = nodes[me];
    joined_after_epoch_ = m.meta.membership_epoch();
    nodes_ = std::move(nodes);
    cv_.notify_all();
  }

  // Data messages carrying more than kInlineBytes go to a thread of their own, in
  // arrival order: the receiving thread stays free to take acknowledgements, heartbeats
  // and handshakes in (and to open the next sealed message) while the handler sums or
  // steps, so none of them waits behind that work. A small message is handled here, with
  // no thread hop, when nothing is queued or being handled, which keeps the order.
  void Deliver(Message&& m) {
    const size_t bytes = DataBytes(m);
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      if (bytes > kInlineBytes || busy_ || !queue_.empty()) {
        queue_.push_back(std::move(m));
        queue_cv_.notify_one();
        return;
      }
      busy_ = true;
    }
    Handle(std::move(m));
    std::lock_guard<std::mutex> lock(queue_mu_);
    busy_ = false;
  }

  void Handle(Message&& m) {
    std::lock_guard<std::mutex> lock(handler_mu_);
    if (handler_) {
      handler_(std::move(m));
    } else {
      early_.push_back(std::move(m));
    }
  }

  void HandleLoop() {
    profile::Tracer::Get().NameThread("handle");
    while (true) {
      Message m;
      {
        std::unique_lock<std::mutex> lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return queue_stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        m = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      Handle(std::move(m));
      std::lock_guard<std::mutex> lock(queue_mu_);
      busy_ = false;
    }
  }

  void HeartbeatLoop() {
    profile::Tracer::Get().NameThread("heartbeat");
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(cfg_.heartbeat_interval_ms));
      if (stopping_ || shutdown_ || !failure_.ok()) continue;
      auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_heard_).count();
      if (silent > cfg_.dead_timeout_ms) {
        lock.unlock();
        Fail(Status::Unavailable("the scheduler (" + cfg_.scheduler_host + ":" + std::to_string(cfg_.scheduler_port) +
                                 ") stopped answering: nothing heard for " + std::to_string(silent) + " ms"));
        lock.lock();
        continue;
      }
      lock.unlock();
      Message beat;
      beat.meta.set_command(wire::HEARTBEAT);
      beat.meta.set_clock_us(profile::NowUs());
      Status s = Send(0, std::move(beat));
      if (!s.ok()) LOG(WARNING) << "heartbeat: " << s.message();
      lock.lock();
    }
  }

  // First, so destroyed last: a queue destroyed with a handler below still removes its
  // listener from a live map.
  std::mutex ack_mu_;  // held while the listeners run
  std::map<int, std::function<void(int id)>> ack_listeners_;  // GUARDED_BY(ack_mu_)
  int next_ack_key_ = 0;                                      // GUARDED_BY(ack_mu_)

  const ClusterConfig cfg_;
  std::unique_ptr<Transport> transport_;
  std::thread receiver_, heartbeat_;  // handle_, below

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // GUARDED_BY(mu_), by id; set by the node table, and a joined worker's entry replaced
  // (ConnectJoined) on the receiving thread: node() hands out copies taken under mu_.
  std::vector<wire::Node> nodes_;
  wire::Node me_;
  int64_t joined_after_epoch_ = 0;  // set with nodes_, before Join returns
  std::map<uint32_t, uint64_t> barrier_done_;  // GUARDED_BY(mu_)
  bool shutdown_ = false;                      // GUARDED_BY(mu_)
  bool stopping_ = false;                      // GUARDED_BY(mu_)
  Status failure_;                             // GUARDED_BY(mu_)
  Clock::time_point last_heard_;               // GUARDED_BY(mu_)
  std::vector<std::function<void(const Status&)>> failure_callbacks_;  // GUARDED_BY(mu_)
  std::set<int> lost_servers_;                                          // GUARDED_BY(mu_): ranks
  std::set<int> placed_spares_;  // GUARDED_BY(mu_): spare ranks named to take a lost server's place
  struct ClockSample {
    int64_t offset_us, rtt_us;
  };
  std::deque<ClockSample> clock_samples_;  // GUARDED_BY(mu_)
  mutable std::mutex refused_mu_;
  std::map<int, int64_t> refused_;  // GUARDED_BY(refused_mu_): messages refused, by command
  int64_t refused_total_ = 0;       // GUARDED_BY(refused_mu_): their sum

  std::thread handle_;
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Message> queue_;  // GUARDED_BY(queue_mu_): received data messages, for handle_
  bool queue_stop_ = false;    // GUARDED_BY(queue_mu_)
  bool busy_ = false;          // GUARDED_BY(queue_mu_): a data message is being handled
  static constexpr size_t kInlineBytes = 64 << 10;

  std::mutex handler_mu_;
  std::function<void(Message&&)> handler_;  // GUARDED_BY(handler_mu_)
  std::deque<Message> early_;               // GUARDED_BY(handler_mu_)
};

Status Cluster::Join(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
                     std::unique_ptr<Cluster>* out) {
  if (cfg.role == wire::SCHEDULER) return Status::InvalidArgument("the scheduler does not join; it runs RunScheduler");
  auto impl = std::make_unique<Impl>(cfg, std::move(transport));
  TALLY_RETURN_IF_ERROR(impl->Join());
  out->reset(new Cluster(std::move(impl)));
  return Status::Ok();
}

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cluster::~Cluster() = default;
const wire::Node& Cluster::me() const { return impl_->me(); }
int Cluster::num_workers() const { return impl_->num_workers(); }
int Cluster::num_servers() const { return impl_->num_servers(); }
int Cluster::spare_servers() const { return impl_->spare_servers(); }
wire::Node Cluster::node(int id) const { return impl_->node(id); }
void Cluster::SetDataHandler(std::function<void(Message&&)> h) { impl_->SetDataHandler(std::move(h)); }
Status Cluster::Send(int id, Message msg) { return impl_->Send(id, std::move(msg)); }
Status Cluster::Barrier(uint32_t group, int timeout_ms) { return impl_->Barrier(group, timeout_ms); }
Status Cluster::Finish(int timeout_ms, int64_t steps) { return impl_->Finish(timeout_ms, steps); }
Status Cluster::WaitForShutdown() { return impl_->WaitForShutdown(); }
Status Cluster::failure() const { return impl_->failure(); }
int64_t Cluster::UnacknowledgedBytes(int id) const { return impl_->UnacknowledgedBytes(id); }
int Cluster::AddAckListener(std::function<void(int id)> fn) { return impl_->AddAckListener(std::move(fn)); }
void Cluster::RemoveAckListener(int key) { impl_->RemoveAckListener(key); }
void Cluster::OnFailure(std::function<void(const Status&)> cb) { impl_->OnFailure(std::move(cb)); }
bool Cluster::ServerAlive(int rank) const { return impl_->ServerAlive(rank); }
int Cluster::server_replicas() const { return impl_->server_replicas(); }
int64_t Cluster::refused() const { return impl_->refused(); }
int64_t Cluster::joined_after_epoch() const { return impl_->joined_after_epoch(); }
bool Cluster::ClockOffset(int64_t* offset_us, int64_t* rtt_us) const { return impl_->ClockOffset(offset_us, rtt_us); }

}  // namespace tally
