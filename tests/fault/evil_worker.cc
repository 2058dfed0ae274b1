// evil_worker: a test-only attacker for tests/fault/evil_worker_test.py. It holds the job's
// secret (TALLY_JOB_SECRET), proves itself "worker 1" (and, for INIT, "worker 0") on
// connections of its own to a running job, and sends, once each, what a compromised
// worker could try (docs/wire.md, "Who may send what" and "Steps"):
//
//   evil_worker --servers 2 --workers 2 --scheduler 127.0.0.1:9000 \
//       --server 127.0.0.1:9001 --server 127.0.0.1:9002 --worker 127.0.0.1:9003 \
//       --slice 0:0:432        # a slice every server holds: key, offset, length
//
// - pushes, pulls, pushpulls and rollbacks of steps far ahead (which a server used to keep
//   without bound), to every server;
// - INIT with chains no server holds (which used to abort a server under
//   --server-replicas), as worker 0, to every server;
// - the scheduler's notices (SHUTDOWN, NODE_DEAD, NODE_TABLE, BARRIER_DONE, SERVER_LOST)
//   to every server and to worker 0, a replica step to the servers and fake answers to
//   worker 0, each as worker 1 and with ids that are no node's (-1, -7; one numbered);
// - to the scheduler: its own notices, a barrier of the servers' group, a spare's signal,
//   and commands from an id that is no node's.
//
// Every request id is above 2^62, so an answer the job sends back to the real worker
// matches none of its own. Prints one line per message sent; exits 0 once all are sent, 1
// when one could not be (a node did not answer the handshake). Not part of `tally`: it is
// built beside the tests and used by them alone.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "net/transport.h"

namespace tally {
namespace {

struct Options {
  int servers = 0, workers = 0;
  std::string scheduler;
  std::vector<std::string> server_addrs, worker_addrs;
  uint64_t key = 0, offset = 0, length = 0;
};

constexpr int64_t kFar = int64_t{1} << 40;
uint64_t g_next_request = uint64_t{1} << 62;

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--servers") o->servers = std::atoi(value.c_str());
    else if (flag == "--workers") o->workers = std::atoi(value.c_str());
    else if (flag == "--scheduler") o->scheduler = value;
    else if (flag == "--server") o->server_addrs.push_back(value);
    else if (flag == "--worker") o->worker_addrs.push_back(value);
    else if (flag == "--slice") {
      unsigned long long k = 0, off = 0, len = 0;
      if (std::sscanf(value.c_str(), "%llu:%llu:%llu", &k, &off, &len) != 3) return false;
      o->key = k, o->offset = off, o->length = len;
    } else {
      return false;
    }
  }
  return o->servers > 0 && o->workers > 1 && !o->scheduler.empty() &&
         static_cast<int>(o->server_addrs.size()) == o->servers && !o->worker_addrs.empty() && o->length > 0;
}

bool SecretFromEnv(std::string* secret) {
  const char* hex = std::getenv("TALLY_JOB_SECRET");
  if (hex == nullptr || std::strlen(hex) != 64) return false;
  for (int i = 0; i < 32; ++i) {
    unsigned byte = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &byte) != 1) return false;
    secret->push_back(static_cast<char>(byte));
  }
  return true;
}

// One authenticated identity's connections to the job's nodes.
class Attacker {
 public:
  Attacker(const Options& o, const std::string& secret, int rank) : o_(o), ids_{o.servers, o.workers, 0} {
    auth_.secret = secret;
    auth_.self = "worker " + std::to_string(rank);
    auth_.job = JobNames{o.servers, o.workers, 0};
    me_ = ids_.Worker(rank);
    transport_ = NewZmqTransport(10000, &auth_);
  }

  bool Connect() {
    bool ok = ConnectTo(kSchedulerId, o_.scheduler);
    for (int s = 0; s < o_.servers; ++s) ok &= ConnectTo(ids_.Server(s), o_.server_addrs[s]);
    ok &= ConnectTo(ids_.Worker(0), o_.worker_addrs[0]);
    return ok;
  }

  // Sends `m` to node `to` as node `sender` (this identity's id unless given), numbered
  // `seq` (0: unnumbered, which the delivery layer hands on at once).
  void Send(int to, Message m, int sender = -100, uint64_t seq = 0) {
    m.meta.set_sender_id(sender == -100 ? me_ : sender);
    m.meta.set_receiver_id(to);
    m.meta.set_seq(seq);
    if (m.meta.request_id() == 0) m.meta.set_request_id(g_next_request++);
    Status s = transport_->Send(to, m);
    std::printf("%s %s as %s (sender_id %d%s) to node %d%s%s\n", s.ok() ? "sent" : "FAILED to send",
                wire::Command_Name(m.meta.command()).c_str(), auth_.self.c_str(), m.meta.sender_id(),
                seq ? (", numbered " + std::to_string(seq)).c_str() : "", to, s.ok() ? "" : ": ",
                s.ok() ? "" : s.message().c_str());
    ok_ &= s.ok();
  }

  Message Data(wire::Command c, int64_t step, bool with_values) const {
    Message m;
    m.meta.set_command(c);
    m.meta.set_step(step);
    m.meta.set_num_workers(o_.workers);
    m.meta.set_dtype(wire::F32);
    m.meta.set_pull_dtype(wire::F32);
    wire::KeySlice* ks = m.meta.add_slices();
    ks->set_key(o_.key);
    ks->set_offset(o_.offset);
    ks->set_length(o_.length);
    if (with_values) m.data.push_back(Tensor::Zeros({static_cast<int64_t>(o_.length)}, DType::kF32));
    return m;
  }

  const NodeIds& ids() const { return ids_; }
  bool ok() const { return ok_; }

 private:
  bool ConnectTo(int id, const std::string& addr) {
    const size_t colon = addr.rfind(':');
    Status s = transport_->Connect(id, addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1));
    if (!s.ok()) std::printf("FAILED to connect to node %d at %s: %s\n", id, addr.c_str(), s.message().c_str());
    return s.ok();
  }

  const Options o_;
  const NodeIds ids_;
  JobAuth auth_;
  int me_ = 0;
  std::unique_ptr<Transport> transport_;
  bool ok_ = true;
};

Message Notice(wire::Command c, const NodeIds& ids) {
  Message m;
  m.meta.set_command(c);
  if (c == wire::SHUTDOWN || c == wire::NODE_DEAD) m.meta.set_error("an evil worker ends the job");
  if (c == wire::NODE_DEAD || c == wire::SERVER_LOST) {
    wire::Node* n = m.meta.add_nodes();
    n->set_role(wire::SERVER);
    n->set_rank(0);
    n->set_id(ids.Server(0));
  }
  if (c == wire::NODE_TABLE) {
    for (int id = 0; id < ids.size(); ++id) m.meta.add_nodes()->set_id(id);
  }
  if (c == wire::BARRIER_DONE) m.meta.set_barrier_group(7);
  return m;
}

// What a node (a server or worker 0) is sent: the scheduler's notices from worker 1, from
// ids that are no node's, and one numbered from such an id.
void SendNotices(Attacker* a, int to) {
  for (wire::Command c : {wire::SHUTDOWN, wire::NODE_DEAD, wire::NODE_TABLE, wire::BARRIER_DONE, wire::SERVER_LOST}) {
    a->Send(to, Notice(c, a->ids()));
    a->Send(to, Notice(c, a->ids()), -1);
    a->Send(to, Notice(c, a->ids()), -7);
  }
  a->Send(to, Notice(wire::SHUTDOWN, a->ids()), -2, /*seq=*/7);
}

int Run(const Options& o, const std::string& secret) {
  Attacker as1(o, secret, 1), as0(o, secret, 0);
  if (!as1.Connect() || !as0.Connect()) return 1;
  const NodeIds& ids = as1.ids();
  for (int s = 0; s < o.servers; ++s) {
    const int to = ids.Server(s);
    as1.Send(to, as1.Data(wire::PUSH, kFar, true));
    as1.Send(to, as1.Data(wire::PUSH, 1000000, true));
    as1.Send(to, as1.Data(wire::PULL, kFar, false));
    as1.Send(to, as1.Data(wire::PUSHPULL, kFar, true));
    as1.Send(to, as1.Data(wire::ROLLBACK, kFar, false));
    for (int chain : {99, -5, 1 << 30}) {
      Message init = as0.Data(wire::INIT, -1, true);
      init.meta.set_chain(chain);
      as0.Send(to, std::move(init));
    }
    as1.Send(to, as1.Data(wire::REPLICATE, 0, true));
    as1.Send(to, as1.Data(wire::PUSH, 0, true), -3);
    SendNotices(&as1, to);
  }
  const int worker0 = ids.Worker(0);
  SendNotices(&as1, worker0);
  for (uint64_t id = 0; id < 8; ++id) {  // fake answers: an error for requests worker 0 may be waiting on
    Message fake = Notice(wire::SHUTDOWN, ids);
    fake.meta.set_command(wire::RESPONSE);
    fake.meta.set_request_id(id + 1);
    as1.Send(worker0, std::move(fake));
  }
  as1.Send(kSchedulerId, Notice(wire::SHUTDOWN, ids));
  as1.Send(kSchedulerId, Notice(wire::NODE_DEAD, ids));
  Message barrier;
  barrier.meta.set_command(wire::BARRIER);
  barrier.meta.set_barrier_group(2);  // the servers' group, which a worker is not in
  as1.Send(kSchedulerId, barrier);
  Message ready;
  ready.meta.set_command(wire::REPLICA_READY);
  as1.Send(kSchedulerId, ready);
  Message done;
  done.meta.set_command(wire::WORKER_DONE);
  as1.Send(kSchedulerId, done, -4);
  as1.Send(kSchedulerId, Notice(wire::SHUTDOWN, ids), -4);
  return as1.ok() && as0.ok() ? 0 : 1;
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  tally::Options o;
  std::string secret;
  if (!tally::ParseArgs(argc, argv, &o) || !tally::SecretFromEnv(&secret)) {
    std::fprintf(stderr,
                 "usage: TALLY_JOB_SECRET=<64 hex> %s --servers M --workers N --scheduler HOST:PORT "
                 "--server HOST:PORT (M times) --worker HOST:PORT (worker 0) --slice KEY:OFFSET:LENGTH\n",
                 argv[0]);
    return 2;
  }
  const int code = tally::Run(o, secret);
  std::fflush(stdout);
  return code;
}
