// Exactly-once, in-order delivery (docs/wire.md, "Delivery"). TCP loses nothing on a live
// connection, but ZeroMQ drops what was in flight when a connection breaks and comes back,
// and the test transport loses, repeats and reorders on purpose. So every message a node
// sends with an id (sender_id >= 0) gets a number per receiver; the receiver delivers
// numbers in order and once, holding early ones back, and acknowledges the highest number
// it has delivered (on its next message back to the sender, or in an ACK of its own at the
// next tick when none goes back, or at once after a repeat or a gap or a message over 64 KB); the sender keeps each message until it is acknowledged and sends the
// oldest one again after a retransmission timeout computed as TCP's (RFC 6298: the smoothed
// round trip plus four times its variation, at least 200 ms; messages up to 64 KB) or
// resend_ms (larger ones), then twice that, and so on up to kMaxBackoff, or at once when a
// repeated acknowledgement shows that the receiver is waiting for it. The floor matters:
// a receiver acknowledges when its receiving thread gets to a message, which may be after
// a sum or an optimizer step, and a healthy connection must not be resent to (TCP below
// loses nothing while it lives). Nor before twice the slowest acknowledgement seen lately
// from that peer: on a loaded link acknowledgements queue behind the peer's own data.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <glog/logging.h>

#include "net/transport.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

class ReliableTransport : public Transport {
 public:
  ReliableTransport(std::unique_ptr<Transport> inner, int resend_ms)
      : inner_(std::move(inner)), resend_(std::chrono::milliseconds(std::max(1, resend_ms))) {
    resender_ = std::thread([this] { ResendLoop(); });
  }
  ~ReliableTransport() override { Close(); }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    return inner_->Bind(host, port, bound_port);
  }
  Status Connect(int id, const std::string& host, int port, const std::string& peer) override {
    return inner_->Connect(id, host, port, peer);
  }

  Status Send(int id, const Message& msg) override {
    if (msg.meta.sender_id() < 0) return inner_->Send(id, msg);  // REGISTER: no id to number from
    Out* out = OutTo(id);
    std::lock_guard<std::mutex> lock(out->mu);
    Message m = msg;  // shares the data frames' storage
    m.meta.set_receiver_id(id);
    const uint64_t seq = ++out->next;
    m.meta.set_seq(seq);
    const uint64_t acked = PiggybackAck(id, &m);
    Status s = inner_->Send(id, m);
    if (s.ok() && acked > 0) AckSent(id, acked);
    // Kept even when the send failed: a later message's number would otherwise wait forever
    // for this one at the receiver. The caller learns of the failure all the same.
    out->unacked_bytes += static_cast<int64_t>(DataBytes(m));
    out->unacked.emplace(seq, Unacked{std::move(m), Clock::now(), FirstWait(*out, msg), false});
    return s;
  }

  int64_t UnacknowledgedBytes(int id) override {
    Out* out = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = out_.find(id);
      if (it == out_.end()) return 0;
      out = it->second.get();
    }
    std::lock_guard<std::mutex> lock(out->mu);
    return out->unacked_bytes;
  }

  Status Recv(Message* msg, int timeout_ms) override {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      if (!ready_.empty()) {
        *msg = std::move(ready_.front());
        ready_.pop_front();
        return Status::Ok();
      }
      int wait = -1;
      if (timeout_ms >= 0) {
        wait = static_cast<int>(std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
      }
      Message m;
      TALLY_RETURN_IF_ERROR(inner_->Recv(&m, wait));
      // Only a node without an id (REGISTER) sends with a negative one, and unnumbered: a
      // numbered message or an acknowledgement from such an id would make state for a node
      // that does not exist, one per id (net/command_rules.h refuses the rest above).
      if (m.meta.sender_id() < 0 && (m.meta.seq() != 0 || m.meta.command() == wire::ACK)) {
        ++rejected_;
        LOG_EVERY_N(WARNING, 100) << "dropped " << wire::Command_Name(m.meta.command()) << " numbered " << m.meta.seq()
                                  << " from node " << m.meta.sender_id() << ", no node's id";
        continue;
      }
      if (m.meta.command() == wire::ACK) {
        Acknowledged(m.meta.sender_id(), m.meta.ack_seq(), /*explicit_ack=*/true);
        continue;
      }
      const uint64_t seq = m.meta.seq();
      const bool large = DataBytes(m) > kSmallBytes;
      if (seq == 0) {
        *msg = std::move(m);
        return Status::Ok();
      }
      const int from = m.meta.sender_id();
      const int me = m.meta.receiver_id();
      if (m.meta.ack_seq() > 0) Acknowledged(from, m.meta.ack_seq(), /*explicit_ack=*/false);
      In& in = in_[from];
      bool in_order = false;
      if (seq <= in.delivered || in.early.count(seq) > 0) {
        ++duplicates_;
        LOG_EVERY_N(INFO, 1000) << "dropped a repeated message from node " << from << " (" << duplicates_
                                << " repeats so far)";
      } else if (seq == in.delivered + 1) {
        in_order = true;
        ready_.push_back(std::move(m));
        ++in.delivered;
        for (auto it = in.early.begin(); it != in.early.end() && it->first == in.delivered + 1;
             it = in.early.erase(it)) {
          ready_.push_back(std::move(it->second));
          ++in.delivered;
        }
      } else if (in.early.size() < kMaxEarly) {
        in.early.emplace(seq, std::move(m));
      } else {
        LOG_EVERY_N(WARNING, 100) << "node " << from << " is more than " << kMaxEarly
                                  << " messages ahead of what has arrived; dropped one (it will be sent again)";
      }
      // In order, the acknowledgement rides on the next message back to the sender, or
      // goes alone at the next tick; a repeat or a gap is answered at once (the sender may
      // be resending for want of it, or waits for the oldest: fast retransmit).
      // A large message is acknowledged at once too: its sender's credit (the bytes it lets
      // into the connection, UnacknowledgedBytes) waits for it.
      if (MarkDelivered(me, from, in.delivered, in_order) || (in_order && large)) {
        Acknowledge(me, from, in.delivered);
        AckSent(from, in.delivered);
      }
    }
  }

  size_t Unacknowledged() override {
    size_t n = 0;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, out] : out_) {
      std::lock_guard<std::mutex> out_lock(out->mu);
      n += out->unacked.size();
    }
    return n;
  }

  void Forget(int id) override {
    Out* out = OutTo(id);
    {
      std::lock_guard<std::mutex> lock(out->mu);
      out->next = out->acked = 0;
      out->unacked.clear();
      out->unacked_bytes = 0;
    }
    {
      std::lock_guard<std::mutex> lock(owed_mu_);
      owed_.erase(id);
    }
    in_.erase(id);  // the receiving thread's, as Forget is called on it
    inner_->Forget(id);
  }

  TransportCounters Counters() override {
    TransportCounters c = inner_->Counters();
    c.resent += resent_;
    c.duplicates += duplicates_;
    c.rejected += rejected_;
    return c;
  }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
    }
    cv_.notify_all();
    resender_.join();
    // What this node delivered but has not acknowledged yet goes now: a node that closes
    // right after the scheduler's SHUTDOWN would otherwise leave it unacknowledged (the
    // tick that acknowledges it may not come before the close on a loaded machine), and
    // the scheduler would send it again to a node that is gone.
    SendOwedAcks();
    inner_->Close();
  }

 private:
  static constexpr size_t kMaxEarly = 1 << 16;
  static constexpr auto kMaxBackoff = std::chrono::seconds(30);
  static constexpr auto kMinWait = std::chrono::milliseconds(200);
  static constexpr size_t kSmallBytes = 64 << 10;

  struct Unacked {
    Message msg;
    Clock::time_point sent;
    Clock::duration wait;  // until it is sent again
    bool resent;           // its acknowledgement then says nothing of the round trip
  };
  struct Out {
    std::mutex mu;  // also keeps a peer's numbers in sending order
    uint64_t next = 0;                    // GUARDED_BY(mu)
    uint64_t acked = 0;                   // GUARDED_BY(mu): the highest acknowledgement
    Clock::duration srtt{0};              // GUARDED_BY(mu): smoothed round trip of small messages; 0: none yet
    Clock::duration rttvar{0};            // GUARDED_BY(mu): its mean deviation
    // A slowly decaying maximum of the acknowledgement delays of messages sent once. On a
    // loaded link a peer's acknowledgements queue behind the data it sends (seconds on a
    // slow link): a message is not sent again before twice this, or every large message
    // would go twice and load the link further.
    Clock::duration slowest_ack{0};       // GUARDED_BY(mu)
    int64_t unacked_bytes = 0;            // GUARDED_BY(mu): data bytes of `unacked`
    std::map<uint64_t, Unacked> unacked;  // GUARDED_BY(mu)
  };
  struct In {
    uint64_t delivered = 0;               // every number up to here has been delivered
    std::map<uint64_t, Message> early;    // arrived ahead of a gap
  };

  Out* OutTo(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& out = out_[id];
    if (!out) out = std::make_unique<Out>();
    return out.get();
  }

  // What this node owes each sender: the number up to which it has delivered, and whether
  // no message back has said so yet.
  struct Owed {
    uint64_t delivered = 0;
    bool pending = false;
    int me = -1;
  };

  // Records a delivery from `from`; true if it must be acknowledged at once.
  bool MarkDelivered(int me, int from, uint64_t delivered, bool in_order) {
    std::lock_guard<std::mutex> lock(owed_mu_);
    Owed& o = owed_[from];
    o.delivered = delivered;
    o.me = me;
    o.pending = in_order;
    return !in_order;
  }

  // Puts what this node owes `to` into m; returns the number acknowledged (0: none).
  uint64_t PiggybackAck(int to, Message* m) {
    std::lock_guard<std::mutex> lock(owed_mu_);
    auto it = owed_.find(to);
    if (it == owed_.end() || it->second.delivered == 0) return 0;
    m->meta.set_ack_seq(it->second.delivered);
    return it->second.delivered;
  }

  void AckSent(int to, uint64_t acked) {
    std::lock_guard<std::mutex> lock(owed_mu_);
    Owed& o = owed_[to];
    if (o.delivered == acked) o.pending = false;
  }

  // Acknowledges, alone, what no message back has carried since the last tick.
  void SendOwedAcks() {
    std::vector<std::pair<int, Owed>> due;
    {
      std::lock_guard<std::mutex> lock(owed_mu_);
      for (auto& [from, o] : owed_) {
        if (!o.pending) continue;
        due.emplace_back(from, o);
        o.pending = false;
      }
    }
    for (const auto& [from, o] : due) Acknowledge(o.me, from, o.delivered);
  }

  // A repeated ACK means the receiver got something after a gap: the oldest message is
  // sent again at once (fast retransmit), not after resend_ms. Acknowledgements carried by
  // other messages repeat all the time and say nothing of gaps.
  void SetAckListener(std::function<void(int id)> fn) override {
    std::lock_guard<std::mutex> lock(listener_mu_);
    ack_listener_ = std::move(fn);
  }

  void Acknowledged(int from, uint64_t seq, bool explicit_ack) {
    if (!TakeAcknowledgement(from, seq, explicit_ack)) return;
    std::lock_guard<std::mutex> lock(listener_mu_);
    if (ack_listener_) ack_listener_(from);
  }

  // Forgets what node `from` acknowledged up to seq; true if that freed some bytes.
  bool TakeAcknowledgement(int from, uint64_t seq, bool explicit_ack) {
    Out* out = OutTo(from);
    std::lock_guard<std::mutex> lock(out->mu);
    const auto now = Clock::now();
    auto end = out->unacked.upper_bound(seq);
    if (out->unacked.begin() != end) out->slowest_ack -= out->slowest_ack / 256;
    bool after_resent = false;
    for (auto it = out->unacked.begin(); it != end; ++it) {
      // Karn: only messages sent once measure the round trip; and none after a message
      // sent again, whose acknowledgement waited for it.
      after_resent |= it->second.resent;
      if (after_resent) continue;
      const auto sample = now - it->second.sent;
      out->slowest_ack = std::max(out->slowest_ack, sample);
      if (DataBytes(it->second.msg) > kSmallBytes) continue;
      if (out->srtt.count() == 0) {
        out->srtt = sample;
        out->rttvar = sample / 2;
      } else {
        const auto deviation = sample > out->srtt ? sample - out->srtt : out->srtt - sample;
        out->rttvar = (3 * out->rttvar + deviation) / 4;
        out->srtt = (7 * out->srtt + sample) / 8;
      }
    }
    for (auto it = out->unacked.begin(); it != end; ++it) out->unacked_bytes -= static_cast<int64_t>(DataBytes(it->second.msg));
    const bool freed = out->unacked.begin() != end;
    out->unacked.erase(out->unacked.begin(), end);
    const bool repeat = explicit_ack && seq == out->acked;
    out->acked = std::max(out->acked, seq);
    if (!repeat || out->unacked.empty()) return freed;
    auto& [oldest, u] = *out->unacked.begin();
    if (oldest != seq + 1 || now - u.sent < resend_ / 4) return freed;
    inner_->Send(from, u.msg).ok();
    u.sent = now;
    u.resent = true;
    ++resent_;
    return freed;
  }

  // The first resend of a small message comes after the retransmission timeout measured on
  // this peer (at least kMinWait), of a large one or before any measurement after
  // resend_ms: a large message's acknowledgement waits for all its bytes.
  Clock::duration FirstWait(const Out& out, const Message& m) const {
    if (out.srtt.count() == 0 || DataBytes(m) > kSmallBytes) return resend_;
    return std::min<Clock::duration>(resend_, std::max<Clock::duration>(kMinWait, out.srtt + 4 * out.rttvar));
  }

  // Best effort: before this node has connected to `to`, the send fails, and the sender's
  // resend brings the acknowledgement later.
  void Acknowledge(int me, int to, uint64_t seq) {
    Message ack;
    ack.meta.set_command(wire::ACK);
    ack.meta.set_sender_id(me);
    ack.meta.set_receiver_id(to);
    ack.meta.set_ack_seq(seq);
    inner_->Send(to, ack).ok();
  }

  void ResendLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    const auto tick = std::min<Clock::duration>(resend_ / 4, std::chrono::milliseconds(10));
    while (!closed_) {
      cv_.wait_for(lock, tick);
      if (closed_) break;
      std::vector<std::pair<int, Out*>> outs;
      for (auto& [id, out] : out_) outs.emplace_back(id, out.get());
      lock.unlock();
      SendOwedAcks();
      const auto now = Clock::now();
      for (auto [id, out] : outs) {
        std::lock_guard<std::mutex> out_lock(out->mu);
        // Only the oldest: acknowledgements are cumulative, so the receiver holds whatever
        // came after the gap, and one resend usually closes it.
        if (!out->unacked.empty()) {
          auto& [seq, u] = *out->unacked.begin();
          if (now - u.sent < u.wait || (!u.resent && now - u.sent < 2 * out->slowest_ack)) continue;
          Status s = inner_->Send(id, u.msg);
          u.sent = now;
          u.resent = true;
          u.wait = std::min<Clock::duration>(std::max<Clock::duration>(u.wait * 2, resend_ / 8), kMaxBackoff);
          ++resent_;
          LOG_EVERY_N(WARNING, 100) << "sent message " << seq << " to node " << id << " again: not acknowledged ("
                                    << resent_ << " resent so far)" << (s.ok() ? "" : "; " + s.message());
        }
      }
      lock.lock();
    }
  }

  std::unique_ptr<Transport> inner_;
  const Clock::duration resend_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::unique_ptr<Out>> out_;  // GUARDED_BY(mu_); entries live as long as this
  bool closed_ = false;                      // GUARDED_BY(mu_)
  std::thread resender_;
  std::atomic<int64_t> resent_{0};

  std::mutex listener_mu_;                     // held while the listener runs
  std::function<void(int id)> ack_listener_;   // GUARDED_BY(listener_mu_)

  std::mutex owed_mu_;
  std::map<int, Owed> owed_;  // GUARDED_BY(owed_mu_), by sender

  // The receiving side: Recv runs on one thread at a time.
  std::map<int, In> in_;
  std::deque<Message> ready_;
  std::atomic<int64_t> duplicates_{0};
  std::atomic<int64_t> rejected_{0};  // numbered messages and ACKs from negative ids
};

}  // namespace

std::string DescribeCounters(const TransportCounters& c) {
  return "delivery: " + std::to_string(c.resent) + " messages resent, " + std::to_string(c.duplicates) +
         " duplicates dropped, " + std::to_string(c.rejected) + " rejected";
}

std::unique_ptr<Transport> NewReliableTransport(std::unique_ptr<Transport> inner, int resend_ms) {
  return std::make_unique<ReliableTransport>(std::move(inner), resend_ms);
}

}  // namespace tally
