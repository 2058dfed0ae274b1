#include "scheduler/scheduler.h"

#include "net/command_rules.h"
#include "net/server_chains.h"
#include "scheduler/join.h"
#include "scheduler/membership.h"
#include "scheduler/ranks.h"
#include "scheduler/slices_lost.h"
#include "profile/trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <thread>

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

class Scheduler {
 public:
  Scheduler(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
            std::function<void(const Status&)> refused, const SchedulerOptions& options)
      : cfg_(cfg),
        elastic_(options.elastic),
        members_(cfg.num_workers, options.membership_log),
        ids_{cfg.num_servers, cfg.num_workers, cfg.spare_servers},
        transport_(std::move(transport)),
        chains_(cfg.num_servers, cfg.server_replicas),
        on_refused_(std::move(refused)) {
    members_.Replay(options.replay);
  }
  ~Scheduler() {
    LOG(INFO) << DescribeCounters(transport_->Counters());
    if (refused_ > 0) {
      LOG(WARNING) << "scheduler: refused " << refused_ << " messages that their senders may not send";
    }
    transport_->Close();
  }

  Status Run(const std::function<void()>& gathered) {
    int port = 0;
    TALLY_RETURN_IF_ERROR(transport_->Bind(cfg_.scheduler_host, cfg_.scheduler_port, &port));
    LOG(INFO) << "scheduler listening on " << cfg_.scheduler_host << ":" << port << " for "
              << cfg_.num_workers << " workers and " << cfg_.num_servers << " servers"
              << (cfg_.spare_servers ? " (and " + std::to_string(cfg_.spare_servers) + " spare)" : "");
    TALLY_RETURN_IF_ERROR(Gather());
    if (gathered) gathered();
    return Serve();
  }

 private:
  int total() const { return ids_.size() - 1; }
  int servers() const { return ids_.all_servers(); }

  // Waits for every node's REGISTER, then assigns ranks and sends the node table.
  Status Gather() {
    std::vector<Message> regs;
    auto start = Clock::now();
    while (static_cast<int>(regs.size()) < total()) {
      int64_t left = cfg_.register_timeout_ms - MsSince(start);
      Message m;
      if (left <= 0 || !transport_->Recv(&m, static_cast<int>(std::min<int64_t>(left, 200))).ok()) {
        if (left <= 0) return GatherTimedOut(cfg_, servers(), regs, transport_.get());
        continue;
      }
      Status allowed = CheckCommandSender(ids_, wire::SCHEDULER, m.meta);
      if (allowed.ok() && m.meta.command() != wire::REGISTER) {
        allowed = Status::InvalidArgument(wire::Command_Name(m.meta.command()) + " before the job gathered");
      }
      if (allowed.ok() && m.meta.nodes_size() != 1) {
        allowed = Status::InvalidArgument("REGISTER naming " + std::to_string(m.meta.nodes_size()) + " nodes, not one");
      }
      if (!allowed.ok()) {
        Refuse(m, allowed);
        continue;
      }
      const wire::Node& asked = m.meta.nodes(0);
      const wire::Role role = asked.role();
      if (!cfg_.job_secret.empty() && m.peer != NodeName(role, asked.rank())) {
        LOG(WARNING) << "refused the registration of " << DescribeNode(asked) << ": it authenticated as "
                     << (m.peer.empty() ? std::string("nobody") : m.peer);
        continue;
      }
      bool repeat = false;  // a node sends REGISTER again until it has the table
      for (const Message& r : regs) {
        const wire::Node& x = r.meta.nodes(0);
        repeat |= x.role() == role && x.rank() == asked.rank() && x.host() == asked.host() &&
                  x.port() == asked.port() && x.pid() == asked.pid();
      }
      if (repeat) continue;
      int have = 0;
      for (const Message& r : regs) have += r.meta.nodes(0).role() == role;
      if ((role != wire::SERVER && role != wire::WORKER) ||
          have >= (role == wire::SERVER ? servers() : cfg_.num_workers)) {
        LOG(WARNING) << "refused the registration of " << DescribeNode(m.meta.nodes(0))
                     << ": the job has no place for it";
        continue;
      }
      regs.push_back(std::move(m));
    }
    TALLY_RETURN_IF_ERROR(AssignRanks(regs));
    for (const wire::Node& n : nodes_) {
      if (n.id() == 0) continue;
      TALLY_RETURN_IF_ERROR(transport_->Connect(n.id(), n.host(), n.port()));
      last_heard_[n.id()] = Clock::now();
    }
    for (const wire::Node& n : nodes_) {
      if (n.id() != 0) TALLY_RETURN_IF_ERROR(SendTable(n.id()));
    }
    LOG(INFO) << "the job gathered: " << cfg_.num_workers << " workers, " << cfg_.num_servers << " servers";
    return Status::Ok();
  }

  Status SendTable(int id) {  // membership_epoch: 0, or the epoch a joiner joins after
    Message table;
    table.meta.set_command(wire::NODE_TABLE);
    table.meta.set_membership_epoch(members_.epoch());
    table.meta.set_receiver_id(id);
    for (const wire::Node& x : nodes_) *table.meta.add_nodes() = x;
    return transport_->Send(id, table);
  }

  Status AssignRanks(const std::vector<Message>& regs) {
    nodes_.assign(1 + total(), wire::Node());
    wire::Node& me = nodes_[kSchedulerId];
    me.set_role(wire::SCHEDULER);
    me.set_id(kSchedulerId);
    me.set_host(cfg_.scheduler_host);
    me.set_port(cfg_.scheduler_port);
    me.set_pid(static_cast<int>(getpid()));
    return tally::AssignRanks(regs, ids_, &nodes_);
  }

  uint32_t GroupOf(int id) const {
    return id == 0 ? kGroupScheduler : nodes_[id].role() == wire::SERVER ? kGroupServers : kGroupWorkers;
  }

  // Waits, up to timeout_ms, until every node has acknowledged what the scheduler sent
  // (SHUTDOWN above all: a node that missed it would wait for the scheduler and then fail).
  // Also gives ZeroMQ, which sends in the background, time to send.
  void DrainAcknowledgements(int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    while (transport_->Unacknowledged() > 0 && Clock::now() < deadline) {
      Message ignored;
      transport_->Recv(&ignored, 20).ok();
    }
  }

  Status Broadcast(const wire::Meta& meta) {
    Status first;
    for (const wire::Node& n : nodes_) {
      if (n.id() == 0 || dead_.count(n.id())) continue;
      Message m;
      m.meta = meta;
      m.meta.set_sender_id(0);
      m.meta.set_receiver_id(n.id());
      Status s = transport_->Send(n.id(), m);
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  }

  // A node reached a barrier of `group`: when every live member has, all are released.
  void OnBarrier(int from, uint32_t group, std::map<uint32_t, std::set<int>>* barriers) {
    auto& arrived = (*barriers)[group];
    if (arrived.empty()) barrier_start_[group] = profile::NowUs();
    arrived.insert(from);
    size_t members = 0;  // a server lost under --server-replicas is no longer waited for
    for (const wire::Node& n : nodes_) members += n.id() != 0 && !dead_.count(n.id()) && (GroupOf(n.id()) & group);
    if (arrived.size() < members) return;
    wire::Meta done;
    done.set_command(wire::BARRIER_DONE);
    done.set_barrier_group(group);
    for (int id : arrived) {
      Message d;
      d.meta = done;
      d.meta.set_receiver_id(id);
      transport_->Send(id, d).ok();
    }
    arrived.clear();
    // From the first arrival to the release: how long the nodes waited for the last.
    const int64_t start = barrier_start_[group];
    profile::Tracer::Get().Complete("barrier", "scheduler", start, profile::NowUs() - start, "group", group);
  }

  Status Serve() {
    std::map<uint32_t, std::set<int>> barriers;
    auto last_beat = Clock::now();
    while (true) {
      Message m;
      if (transport_->Recv(&m, 50).ok()) {
        const int from = m.meta.sender_id();
        if (m.meta.command() == wire::REGISTER && from == -1) {  // a repeat that crossed the node table, or a join
          if (elastic_) TALLY_RETURN_IF_ERROR(OnJoin(m));
          continue;
        }
        Status allowed = CheckCommandSender(ids_, wire::SCHEDULER, m.meta);
        if (allowed.ok() && m.meta.command() == wire::BARRIER) allowed = CheckBarrier(from, m.meta.barrier_group());
        if (!allowed.ok()) {
          Refuse(m, allowed);
          continue;
        }
        if (left_.count(from)) continue;  // a leaver on its way out: its WORKER_DONE, heartbeats
        last_heard_[from] = Clock::now();
        switch (m.meta.command()) {
          case wire::HEARTBEAT:
            if (m.meta.clock_us() != 0) AnswerClock(from, m.meta.clock_us());
            break;
          case wire::BARRIER:
            OnBarrier(from, m.meta.barrier_group(), &barriers);
            break;
          case wire::REPLICA_READY:
            SpareReady(from);
            break;
          case wire::WORKER_DONE:
            profile::Tracer::Get().Instant("worker done", "scheduler", profile::NowUs());
            done_.insert(from);
            if (elastic_) EndJoinsPastTheEnd(m.meta.step());
            break;
          case wire::LEAVE:
          case wire::MEMBERSHIP_REPORT: {
            Status s = OnMembershipMessage(m);
            if (!s.ok()) return s;
            break;
          }
          default:
            break;  // ACK: the delivery layer's, taken in below this loop
        }
      }
      if (MsSince(last_beat) >= cfg_.heartbeat_interval_ms) {
        last_beat = Clock::now();
        wire::Meta beat;
        beat.set_command(wire::HEARTBEAT);
        Broadcast(beat).ok();
      }
      std::vector<int> silent;
      for (const auto& [id, when] : last_heard_) {
        if (MsSince(when) > cfg_.dead_timeout_ms) silent.push_back(id);
      }
      if (!silent.empty()) {
        Status s = OnSilent(silent);
        if (!s.ok()) return s;
      }
      if (AllLiveDone(done_)) return EndTheJob();
    }
  }

  // Every (live) worker is done.
  bool AllLiveDone(const std::set<int>& done) const {
    if (members_.deciding()) return false;
    for (int r : members_.live()) {
      if (!done.count(ids_.Worker(r))) return false;
    }
    return true;
  }

  Status EndTheJob() {
    wire::Meta bye;
    bye.set_command(wire::SHUTDOWN);
    Broadcast(bye).ok();
    LOG(INFO) << "every worker is done; the job ends";
    DrainAcknowledgements(3000);
    return Status::Ok();
  }

  // A worker's LEAVE, a server's MEMBERSHIP_REPORT.
  Status OnMembershipMessage(const Message& m) {
    if (m.meta.command() == wire::LEAVE) return OnLeave(m);
    if (!members_.Report(m.meta.sender_id(), m.meta.membership_epoch(), m.meta.step(), m.meta.applied_max())) {
      return Status::Ok();
    }
    return DecideMembership();
  }

  // --elastic: a worker joins the running job (scheduler/join.h, docs/wire.md "A worker joins").
  Status OnJoin(const Message& m) {
    int rank = -1;
    if (RepeatsRegister(nodes_, m)) return Status::Ok();
    Status why = JoinRank(cfg_, members_, m, &rank);
    if (why.ok() && !done_.empty()) {  // its first step could come after the job's last
      why = Status::Unavailable("worker " + std::to_string(ids_.WorkerRank(*done_.begin())) + " finished: the job ends");
    }
    if (!why.ok()) {
      LOG_EVERY_N(WARNING, 10) << "scheduler: not admitting a REGISTER: " << why.message();
      return Status::Ok();
    }
    const int id = ids_.Worker(rank);
    const wire::Node before = nodes_[id];
    PlaceNode(m.meta.nodes(0), rank, ids_, &nodes_);
    transport_->Forget(id);  // a new process: its messages are numbered from 1
    if (!transport_->Connect(id, nodes_[id].host(), nodes_[id].port()).ok() || !SendTable(id).ok()) {
      nodes_[id] = before;  // it sends REGISTER again
      return Status::Ok();
    }
    for (const wire::Meta& past : changes_) {  // its list of changes starts with the job's
      Message told;
      told.meta = RetoldMembership(past, nodes_, ids_);
      told.meta.set_receiver_id(id);
      transport_->Send(id, told).ok();
    }
    for (std::set<int>* gone : {&dead_, &left_, &done_}) gone->erase(id);
    last_heard_[id] = Clock::now();
    members_.QueueJoin(rank, "worker " + std::to_string(rank) + " joined (" + nodes_[id].host() + ":" +
                                 std::to_string(nodes_[id].port()) + ", pid " + std::to_string(nodes_[id].pid()) + ")");
    return StartMembership();
  }

  // --elastic: worker `id` leaves on its own before step `step` (it pushed every step before);
  // worker 0 too, the lead passing to the lowest live rank (docs/faults.md, "The lead").
  // Outside --elastic a LEAVE is refused like any message its sender may not send: it ends
  // nothing.
  Status OnLeave(const Message& m) {
    const int id = m.meta.sender_id(), rank = ids_.WorkerRank(id);
    const int64_t step = m.meta.step();
    if (!elastic_ || step < 0) {
      Refuse(m, Status::InvalidArgument("LEAVE from " + DescribeSender(ids_, id) + " before step " +
                                        std::to_string(step) + ": " +
                                        (!elastic_ ? "the job is not --elastic" : "a negative step")));
      return Status::Ok();
    }
    left_.insert(id);
    last_heard_.erase(id);
    LOG(INFO) << DescribeNode(nodes_[id]) << " leaves the job before step " << step << " (SIGTERM)";
    members_.Queue(rank, "worker " + std::to_string(rank) + " left before step " + std::to_string(step) +
                             " (SIGTERM)");
    return StartMembership();
  }

  // Starts the next queued leave: every live server is asked how far the leaver counts.
  Status StartMembership() {
    int rank = -1;
    if (!members_.Start(&rank)) return Status::Ok();
    change_began_ = Clock::now();
    std::set<int> servers;
    wire::Meta prepare;
    prepare.set_command(wire::MEMBERSHIP_PREPARE);
    prepare.set_membership_epoch(members_.epoch() + 1);
    *prepare.add_nodes() = nodes_[ids_.Worker(rank)];
    for (const wire::Node& n : nodes_) {
      if (n.id() == 0 || n.role() != wire::SERVER || dead_.count(n.id())) continue;
      Message m;
      m.meta = prepare;
      m.meta.set_receiver_id(n.id());
      if (transport_->Send(n.id(), m).ok()) servers.insert(n.id());
    }
    members_.Expect(servers);
    return Status::Ok();
  }

  // Every server has reported: the step the change starts from, told to every node.
  Status DecideMembership() {
    const int leaver = members_.leaver();
    const bool joined = members_.joining();
    int64_t from = 0, skip = -1;
    Status s = members_.Decide(&from, &skip);
    if (!s.ok()) return DeclareDead({ids_.Worker(leaver)}, s.message());
    wire::Meta m;
    m.set_command(wire::MEMBERSHIP);
    m.set_membership_epoch(members_.epoch());
    m.set_step(from);
    if (skip >= 0) m.set_skipped_step(skip + 1);
    if (joined) m.set_applied_max(members_.last_applied());  // how far the joiner may pull at once
    m.set_num_workers(static_cast<int>(members_.live().size()));
    std::string live;
    for (int r : members_.live()) {
      *m.add_nodes() = nodes_[ids_.Worker(r)];
      live += (live.empty() ? "" : ", ") + std::to_string(r);
    }
    Broadcast(m).ok();
    changes_.push_back(m);
    LOG(INFO) << "membership " << members_.epoch() << ": " << members_.why() << "; from step " << from << " the "
              << members_.live().size() << " live workers are " << live
              << (skip >= 0 ? "; step " + std::to_string(skip) + " is skipped everywhere: the leaver's push of it " +
                                  "reached some slices only"
                            : std::string())
              << " (decided in " << MsSince(change_began_) << " ms)";
    profile::Tracer::Get().Instant("membership", "scheduler", profile::NowUs());
    const int id = ids_.Worker(leaver);
    if (joined && (dead_.count(id) || left_.count(id))) members_.Queue(leaver, members_.why() + "; it left meanwhile");
    if (joined) {
      joins_[id] = {from, members_.async()};
      EndJoinsPastTheEnd(0);
      return StartMembership();  // a joiner gone meanwhile leaves next
    }
    joins_.erase(id);
    if (left_.count(id)) {  // alive: it waits for the job's end, which is its own
      Message bye;
      bye.meta.set_command(wire::SHUTDOWN);
      bye.meta.set_receiver_id(id);
      transport_->Send(id, bye).ok();
    }
    dead_.insert(id);
    return StartMembership();
  }

  // --elastic: a worker finished after `end` steps of the run (WORKER_DONE's step; 0: it did
  // not say). A synchronous step needs every live worker, so the job's last step is end - 1
  // for all of them; a joiner whose first step is at or past `end` has nothing to train and
  // would wait for it forever: it is told the job ended before its first step (it exits 0
  // saying so) and counts as done, so the job ends now (docs/faults.md, "A worker joins").
  void EndJoinsPastTheEnd(int64_t end) {
    run_end_ = std::max(run_end_, end);
    for (const auto& [id, join] : joins_) {
      if (run_end_ <= 0 || join.async || join.from < run_end_ || done_.count(id)) continue;
      const std::string why = "the job's last step was " + std::to_string(run_end_ - 1) + ", before worker " +
                              std::to_string(ids_.WorkerRank(id)) + "'s first, step " + std::to_string(join.from) +
                              ": " + kEndedBeforeItsFirstStep;
      LOG(WARNING) << "scheduler: " << why;
      Message bye;
      bye.meta.set_command(wire::SHUTDOWN);
      bye.meta.set_receiver_id(id);
      bye.meta.set_error(why);
      transport_->Send(id, bye).ok();
      done_.insert(id);
    }
  }

  // A barrier names a group of nodes (kGroup*) of which its sender is one: a node cannot
  // count itself into, and so release, a barrier of others.
  Status CheckBarrier(int from, uint32_t group) const {
    if (group == 0 || (group & ~kGroupAll) != 0 || (GroupOf(from) & group) == 0) {
      return Status::InvalidArgument("BARRIER of group " + std::to_string(group) + " from " +
                                     DescribeSender(ids_, from) + ", which is not in it");
    }
    return Status::Ok();
  }

  // A message its sender may not send: logged (the first ones, then one in 1000) and
  // counted, never applied.
  void Refuse(const Message& m, const Status& why) {
    ++refused_;
    if (LogsRefusal(refused_)) {
      LOG(WARNING) << "scheduler: refused " << why.message() << (m.peer.empty() ? "" : ", authenticated as " + m.peer)
                   << " (" << refused_ << " refused so far)";
    }
    if (on_refused_) on_refused_(why);
  }

  // The clock half of a heartbeat (wire.proto, clock_us): answered at once, so that the
  // round trip the node measures is short.
  void AnswerClock(int id, int64_t node_clock_us) {
    Message m;
    m.meta.set_command(wire::HEARTBEAT);
    m.meta.set_receiver_id(id);
    m.meta.set_clock_echo_us(node_clock_us);
    m.meta.set_clock_us(profile::NowUs());
    transport_->Send(id, m).ok();
  }

  // `silent` and the nodes silent for over half the dead timeout: when the job ends, nodes
  // killed together are named together, though one of them crossed the timeout first (its
  // last heartbeat was older by up to an interval, more on a loaded machine). Each is named
  // with how long it has been silent.
  std::vector<int> AlsoSilent(std::vector<int> silent) const {
    for (const auto& [id, when] : last_heard_) {
      if (MsSince(when) > cfg_.dead_timeout_ms / 2 && std::find(silent.begin(), silent.end(), id) == silent.end()) {
        silent.push_back(id);
      }
    }
    return silent;
  }

  // Nodes past the dead timeout. Servers whose slices all live on (--server-replicas: a
  // ready holder of every chain is alive) are lost and the job goes on (SERVER_LOST), each
  // replaced by a free spare if there is one; any other death ends the job, naming every
  // node dead so far.
  Status OnSilent(std::vector<int> silent) {
    if (elastic_) {
      std::vector<int> rest;
      for (int id : silent) {
        if (!ids_.IsWorker(id)) {
          rest.push_back(id);
          continue;
        }
        LOG(ERROR) << DescribeNode(nodes_[id]) << " stopped answering: no heartbeat for "
                   << MsSince(last_heard_[id]) << " ms; it leaves the job (--elastic)";
        members_.Queue(ids_.WorkerRank(id), "worker " + std::to_string(ids_.WorkerRank(id)) +
                                                " stopped answering: no heartbeat for " +
                                                std::to_string(MsSince(last_heard_[id])) + " ms");
        last_heard_.erase(id);
        dead_.insert(id);
      }
      Status s = StartMembership();
      if (!s.ok() || rest.empty()) return s;
      silent = rest;
    }
    bool fatal = false;
    ServerChains after = chains_;
    for (int id : silent) {
      const bool server = id != 0 && nodes_[id].role() == wire::SERVER;
      fatal |= !server || cfg_.server_replicas == 0;
      if (server) after.Lose(ids_.ServerRank(id));
    }
    const std::string lost = fatal ? "" : LostSlices(chains_, after, unready_, cfg_.server_replicas);
    if (fatal) return DeclareDead(AlsoSilent(silent), lost);
    if (!lost.empty()) return DeclareDead(silent, lost);
    for (int id : silent) dead_.insert(id);  // none of them is a free spare any more
    for (int id : silent) {
      if (members_.Lost(id)) TALLY_RETURN_IF_ERROR(DecideMembership());
    }
    for (int id : silent) {
      last_heard_.erase(id);
      const int rank = ids_.ServerRank(id);
      unready_.erase(rank);
      // A spare takes the place of a server that held slices (not of another free spare).
      const bool held = !chains_.ChainsOf(rank).empty();
      const int spare = held ? FreeSpare(chains_, ids_, cfg_.num_servers, dead_) : -1;
      if (spare >= 0) unready_.insert(spare);
      chains_.Lose(rank, spare);
      LOG(ERROR) << DescribeNode(nodes_[id]) << " stopped answering: "
                 << (held ? "its slices go on on their replicas" : "a spare, holding nothing")
                 << (spare >= 0 ? "; spare " + DescribeNode(nodes_[ids_.Server(spare)]) + " takes its place" : "");
      profile::Tracer::Get().Instant("server lost", "scheduler", profile::NowUs());
      wire::Meta m;
      m.set_command(wire::SERVER_LOST);
      *m.add_nodes() = nodes_[id];
      if (spare >= 0) *m.add_nodes() = nodes_[ids_.Server(spare)];
      Broadcast(m).ok();
    }
    return Status::Ok();
  }

  // A spare has every slice of the chains it took over: it counts as their holder now.
  void SpareReady(int id) {
    if (!ids_.IsServer(id) || !unready_.erase(ids_.ServerRank(id))) return;
    LOG(INFO) << DescribeNode(nodes_[id]) << " holds the slices of the place it took: "
              << "--server-replicas " << cfg_.server_replicas << " restored there";
    profile::Tracer::Get().Instant("spare ready", "scheduler", profile::NowUs());
  }

  Status DeclareDead(const std::vector<int>& silent, const std::string& lost) {
    for (int id : silent) dead_.insert(id);
    std::string who;
    wire::Meta dead;
    dead.set_command(wire::NODE_DEAD);
    for (int id : dead_) {
      *dead.add_nodes() = nodes_[id];
      const std::string heard = last_heard_.count(id) ? ": no heartbeat for " + std::to_string(MsSince(last_heard_[id])) + " ms" : "";
      who += (who.empty() ? "" : "; ") + DescribeNode(nodes_[id]) + " stopped answering" + heard;
    }
    if (!lost.empty()) dead.set_error(lost);
    const std::string why = who + (lost.empty() ? "" : "; " + lost);
    LOG(ERROR) << why << "; ending the job";
    Broadcast(dead).ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return Status::Unavailable(why);
  }

  const ClusterConfig cfg_;
  const bool elastic_;
  ElasticMembership members_;      // --elastic: the live workers and the change being decided
  std::set<int> left_;             // workers that said LEAVE (ids): alive, on their way out
  std::vector<wire::Meta> changes_;  // every MEMBERSHIP sent, by epoch: told again to a joiner
  struct Join {
    int64_t from;  // its first step
    bool async;
  };
  std::map<int, Join> joins_;      // live workers that joined the running job, by id
  std::set<int> done_;             // workers that said WORKER_DONE (or were told the job ended)
  int64_t run_end_ = 0;            // the most steps of the run a worker finished after (0: none said)
  Clock::time_point change_began_;  // of the change being decided
  const NodeIds ids_;
  std::unique_ptr<Transport> transport_;
  ServerChains chains_;            // who holds each chain, after the losses so far
  std::set<int> unready_;          // spares that took a place and are still receiving it
  std::vector<wire::Node> nodes_;  // by id
  std::map<int, Clock::time_point> last_heard_;
  std::set<int> dead_;
  std::map<uint32_t, int64_t> barrier_start_;  // by group: the first arrival's time
  std::function<void(const Status&)> on_refused_;
  int64_t refused_ = 0;  // messages refused: their senders may not send them
};

}  // namespace

Status RunScheduler(const ClusterConfig& cfg, std::unique_ptr<Transport> transport,
                    const std::function<void()>& gathered, std::function<void(const Status&)> refused,
                    const SchedulerOptions& options) {
  Scheduler s(cfg, std::move(transport), std::move(refused), options);
  return s.Run(gathered);
}

}  // namespace tally
