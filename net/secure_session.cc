#include "net/secure_session.h"

#include <openssl/crypto.h>

#include <cstring>

namespace tally {
namespace {

// Connections a node remembers: every member reconnecting a few times, plus room for
// handshakes that never proved anything (they are forgotten first).
size_t MaxConnections(const JobNames& job) { return 8 * static_cast<size_t>(job.size()) + 64; }

}  // namespace

ClientSession::ClientSession(const JobAuth* auth, std::string server) : auth_(auth), server_(std::move(server)) {}

std::string ClientSession::Hello() {
  ready_ = false;
  counter_ = 0;
  RandomBytes(sent_.client_nonce, kNonceBytes);
  sent_.client = auth_->self;
  sent_.server = server_;
  hello_ = EncodeHello(sent_);
  return hello_;
}

Status ClientSession::OnReply(const void* data, size_t n) {
  RefuseReason why;
  if (ParseRefuse(data, n, &why)) {
    ready_ = false;
    return Status::Unavailable(server_ + " refused the secure handshake: " + DescribeRefuse(why));
  }
  Welcome w;
  if (!ParseWelcome(data, n, &w)) return Status::InvalidArgument("a reply from " + server_ + " that is not a WELCOME");
  // An answer to an older HELLO (one that timed out) is no use and no harm. A repeat of the
  // accepted one (replayed on the way) must change nothing: its keys are the ones in use,
  // and starting their counter again would repeat GCM nonces under them.
  if (ready_ || hello_.empty() || std::memcmp(w.client_nonce, sent_.client_nonce, kNonceBytes) != 0) {
    return Status::Ok();
  }
  const ConnectionKeys keys =
      DeriveConnectionKeys(auth_->secret, auth_->self, server_, sent_.client_nonce, w.server_nonce);
  uint8_t proof[kTagBytes];
  WelcomeProof(keys, hello_, w, proof);
  if (CRYPTO_memcmp(proof, w.proof, kTagBytes) != 0) {
    return Status::InvalidArgument(server_ + " does not hold this job's secret (its WELCOME fails the proof)");
  }
  key_ = keys.client_to_server;  // counter_ is 0 since Hello()
  ready_ = true;
  return Status::Ok();
}

std::vector<size_t> ClientSession::SealedSizes(const std::string& meta, const std::vector<Tensor>& data) const {
  std::vector<size_t> sizes{kSealedHeaderBytes + SealedBytes(meta.size())};
  for (const Tensor& t : data) sizes.push_back(SealedBytes(t.nbytes()));
  return sizes;
}

void ClientSession::Seal(const std::string& meta, const std::vector<Tensor>& data, const std::vector<uint8_t*>& outs) {
  CHECK(ready_);
  CHECK_EQ(outs.size(), data.size() + 1);
  SealedHeader h;
  h.counter = ++counter_;
  h.parts = static_cast<uint32_t>(outs.size());
  PutSealedHeader(h, outs[0]);
  std::vector<PartJob> parts{{meta.data(), meta.size(), outs[0] + kSealedHeaderBytes}};
  for (size_t i = 0; i < data.size(); ++i) parts.push_back({data[i].raw_data(), data[i].nbytes(), outs[i + 1]});
  SealParts(key_, outs[0], parts);
}

ServerSessions::ServerSessions(const JobAuth* auth) : auth_(auth) {}

std::string ServerSessions::OnHandshake(const std::string& id, const void* data, size_t n, std::string* why) {
  Hello h;
  if (!ParseHello(data, n, &h)) {
    *why = "a handshake frame that is not a HELLO";
    return "";
  }
  if (!auth_->job.Has(h.client)) {
    *why = "a HELLO from '" + h.client + "', not a node of this job";
    return EncodeRefuse(RefuseReason::kNotAMember);
  }
  if (h.server != auth_->self) {
    *why = "a HELLO from '" + h.client + "' for '" + h.server + "', not this node (" + auth_->self + ")";
    return EncodeRefuse(RefuseReason::kNotThisNode);
  }
  Welcome w;
  std::memcpy(w.client_nonce, h.client_nonce, kNonceBytes);
  RandomBytes(w.server_nonce, kNonceBytes);
  const ConnectionKeys keys = DeriveConnectionKeys(auth_->secret, h.client, auth_->self, h.client_nonce, w.server_nonce);
  WelcomeProof(keys, std::string(static_cast<const char*>(data), n), w, w.proof);
  if (connections_.count(id) == 0) MakeRoom();
  Connection& c = connections_[id];
  c.peer = h.client;
  c.key = keys.client_to_server;
  c.last = 0;
  c.used = ++clock_;
  return EncodeWelcome(w);
}

// Forgets a connection that never proved the secret, else the one unused longest.
void ServerSessions::MakeRoom() {
  if (connections_.size() < MaxConnections(auth_->job)) return;
  auto victim = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    const bool better = victim == connections_.end() || (it->second.last == 0) > (victim->second.last == 0) ||
                        ((it->second.last == 0) == (victim->second.last == 0) && it->second.used < victim->second.used);
    if (better) victim = it;
  }
  connections_.erase(victim);
}

Status ServerSessions::Open(const std::string& id, std::vector<WireFrame>* frames, std::string* peer,
                            std::string* answer) {
  std::vector<WireFrame>& f = *frames;
  SealedHeader h;
  if (f.empty() || !ParseSealedHeader(f[0].data, f[0].size, &h)) {
    return Status::InvalidArgument("not a sealed message (does its sender run without the job's secret?)");
  }
  auto it = connections_.find(id);
  if (it == connections_.end()) {
    *answer = EncodeRefuse(RefuseReason::kNoSession);
    return Status::InvalidArgument("a sealed message on a connection without a handshake");
  }
  Connection& c = it->second;
  if (h.parts != f.size()) {
    return Status::InvalidArgument(c.peer + " sent " + std::to_string(f.size()) + " frames where the header says " +
                                   std::to_string(h.parts));
  }
  if (h.counter <= c.last) {
    return Status::InvalidArgument("a replayed or reordered message from " + c.peer + " (counter " +
                                   std::to_string(h.counter) + ", already past " + std::to_string(c.last) + ")");
  }
  std::vector<PartJob> parts;
  for (size_t i = 0; i < f.size(); ++i) {
    const size_t skip = i == 0 ? kSealedHeaderBytes : 0;
    size_t plain = 0;
    if (!PlainBytes(f[i].size - skip, &plain)) {
      return Status::InvalidArgument("frame " + std::to_string(i) + " from " + c.peer + " has a truncated record");
    }
    uint8_t* p = static_cast<uint8_t*>(const_cast<void*>(f[i].data)) + skip;
    parts.push_back({p, plain, p});
  }
  if (!OpenParts(c.key, static_cast<const uint8_t*>(f[0].data), parts)) {
    return Status::InvalidArgument("a message from " + c.peer + " fails authentication");
  }
  c.last = h.counter;
  c.used = ++clock_;
  f[0].data = static_cast<const uint8_t*>(f[0].data) + kSealedHeaderBytes;
  for (size_t i = 0; i < f.size(); ++i) f[i].size = parts[i].plain;
  *peer = c.peer;
  return Status::Ok();
}

}  // namespace tally
