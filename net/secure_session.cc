#include "net/secure_session.h"

#include <openssl/crypto.h>

#include <cstring>

namespace tally {
namespace {

static_assert(kHmacBytes == kNonceBytes, "the cookie is the server nonce");

std::unordered_set<std::string> Members(const JobNames& job) {
  std::unordered_set<std::string> names;
  for (int id = 0; id < job.size(); ++id) names.insert(job.Of(id));
  return names;
}

void PutBe64(uint64_t v, std::string* s) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>(v >> (8 * i)));
}

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
  // An answer to an older HELLO (one that timed out) is no use and no harm. Once ready, so
  // is any other answer to this one (a repeat, or one to the same HELLO sent again): its
  // keys, or others, must not replace those in use, and starting their counter again would
  // repeat GCM nonces under them.
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
  Confirm c;
  std::memcpy(c.client_nonce, sent_.client_nonce, kNonceBytes);
  c.window = w.window;
  c.client = auth_->self;
  c.server = server_;
  ConfirmTag(keys, c, c.tag);
  confirm_ = EncodeConfirm(c);
  key_ = keys.client_to_server;  // counter_ is 0 since Hello()
  ready_ = true;
  return Status::Ok();
}

Status ClientSession::SealedSizes(const std::string& meta, const std::vector<Tensor>& data,
                                  std::vector<size_t>* sizes) const {
  std::vector<size_t> plain{meta.size()};
  for (const Tensor& t : data) plain.push_back(t.nbytes());
  TALLY_RETURN_IF_ERROR(CheckSealable(plain));
  sizes->clear();
  for (size_t n : plain) sizes->push_back(SealedBytes(n));
  (*sizes)[0] += kSealedHeaderBytes;
  return Status::Ok();
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

uint64_t CookieWindow(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count()) /
         kCookieWindowSeconds;
}

ServerSession::ServerSession(std::string peer, const AeadKey& key, const uint8_t client_nonce[kNonceBytes])
    : peer_(std::move(peer)), key_(key) {
  std::memcpy(client_nonce_, client_nonce, kNonceBytes);
}

Status ServerSession::Open(std::vector<WireFrame>* frames, const Place& place) {
  std::vector<WireFrame>& f = *frames;
  SealedHeader h;
  if (f.empty() || !ParseSealedHeader(f[0].data, f[0].size, &h)) {
    return Status::InvalidArgument("a message from " + peer_ + " that is not sealed");
  }
  if (h.parts != f.size()) {
    return Status::InvalidArgument(peer_ + " sent " + std::to_string(f.size()) + " frames where the header says " +
                                   std::to_string(h.parts));
  }
  if (h.counter <= last_) {
    return Status::InvalidArgument("a replayed or reordered message from " + peer_ + " (counter " +
                                   std::to_string(h.counter) + ", already past " + std::to_string(last_) + ")");
  }
  std::vector<PartJob> parts;
  for (size_t i = 0; i < f.size(); ++i) {
    const size_t skip = i == 0 ? kSealedHeaderBytes : 0;
    size_t plain = 0;
    if (!PlainBytes(f[i].size - skip, &plain)) {
      return Status::InvalidArgument("frame " + std::to_string(i) + " from " + peer_ + " has a truncated record");
    }
    uint8_t* p = static_cast<uint8_t*>(const_cast<void*>(f[i].data)) + skip;
    parts.push_back({p, plain, p});
  }
  const uint8_t* header = static_cast<const uint8_t*>(f[0].data);
  std::vector<bool> placed(f.size(), false);
  bool opened;
  if (place != nullptr && f.size() > 1) {  // the Meta first, to learn where the data goes
    opened = OpenParts(key_, header, parts, 0, 1);
    for (size_t i = 1; opened && i < f.size(); ++i) {
      if (uint8_t* dst = place(parts[0].out, parts[0].plain, i, parts[i].plain)) {
        parts[i].out = dst;
        placed[i] = true;
      }
    }
    opened = opened && OpenParts(key_, header, parts, 1, f.size());
  } else {
    opened = OpenParts(key_, header, parts);
  }
  if (!opened) return Status::InvalidArgument("a message from " + peer_ + " fails authentication");
  last_ = h.counter;
  f[0].data = header + kSealedHeaderBytes;
  for (size_t i = 0; i < f.size(); ++i) {
    f[i].size = parts[i].plain;
    if (!placed[i]) continue;
    if (f[i].release) f[i].release();  // the sealed block; the plain bytes are the placer's
    f[i].release = nullptr;
    f[i].data = parts[i].out;
  }
  return Status::Ok();
}

Responder::Responder(const JobAuth* auth) : auth_(auth), members_(Members(auth->job)) {
  uint8_t key[kKeyBytes];
  RandomBytes(key, sizeof key);
  cookie_ = std::make_unique<HmacSha256>(key);
  OPENSSL_cleanse(key, sizeof key);
}

Status Responder::CheckNames(const std::string& client, const std::string& server, RefuseReason* why) const {
  if (members_.count(client) == 0) {
    *why = RefuseReason::kNotAMember;
    return Status::InvalidArgument("'" + client + "' is not a node of this job");
  }
  if (server != auth_->self) {
    *why = RefuseReason::kNotThisNode;
    return Status::InvalidArgument("'" + client + "' asks for '" + server + "', not this node (" + auth_->self + ")");
  }
  return Status::Ok();
}

void Responder::Cookie(uint64_t connection, uint64_t window, const uint8_t client_nonce[kNonceBytes],
                       const std::string& client, uint8_t server_nonce[kNonceBytes]) {
  std::string in = "tally cookie";
  PutBe64(window, &in);
  PutBe64(connection, &in);
  in.append(reinterpret_cast<const char*>(client_nonce), kNonceBytes);
  in.push_back(static_cast<char>(client.size()));
  in.append(client);
  cookie_->Compute(in.data(), in.size(), server_nonce);
}

std::string Responder::OnHello(uint64_t connection, const void* data, size_t n, uint64_t window, std::string* why) {
  why->clear();
  Hello h;
  if (!ParseHello(data, n, &h)) {
    *why = "a handshake frame that is not a HELLO";
    return "";
  }
  RefuseReason reason;
  Status named = CheckNames(h.client, h.server, &reason);
  if (!named.ok()) {
    *why = "a HELLO: " + named.message();
    return EncodeRefuse(reason);
  }
  Welcome w;
  std::memcpy(w.client_nonce, h.client_nonce, kNonceBytes);
  w.window = window;
  Cookie(connection, window, h.client_nonce, h.client, w.server_nonce);
  const ConnectionKeys keys = DeriveConnectionKeys(auth_->secret, h.client, auth_->self, h.client_nonce, w.server_nonce);
  WelcomeProof(keys, std::string(static_cast<const char*>(data), n), w, w.proof);
  return EncodeWelcome(w);
}

Status Responder::OnConfirm(uint64_t connection, const void* data, size_t n, uint64_t window,
                            std::shared_ptr<ServerSession>* session) {
  Confirm c;
  if (!ParseConfirm(data, n, &c)) return Status::InvalidArgument("a handshake frame that is not a CONFIRM");
  RefuseReason reason;
  Status named = CheckNames(c.client, c.server, &reason);
  if (!named.ok()) return Status::InvalidArgument("a CONFIRM: " + named.message());
  if (c.window != window && c.window + 1 != window) {
    return Status::InvalidArgument("a CONFIRM from '" + c.client + "' of time window " + std::to_string(c.window) +
                                   ", not this one (" + std::to_string(window) + ") or the one before");
  }
  uint8_t server_nonce[kNonceBytes];
  Cookie(connection, c.window, c.client_nonce, c.client, server_nonce);
  const ConnectionKeys keys = DeriveConnectionKeys(auth_->secret, c.client, auth_->self, c.client_nonce, server_nonce);
  uint8_t tag[kTagBytes];
  ConfirmTag(keys, c, tag);
  if (CRYPTO_memcmp(tag, c.tag, kTagBytes) != 0) {
    return Status::InvalidArgument("a CONFIRM from '" + c.client +
                                   "' fails authentication (no WELCOME of this connection, or not this job's secret)");
  }
  *session = std::make_shared<ServerSession>(c.client, keys.client_to_server, c.client_nonce);
  return Status::Ok();
}

}  // namespace tally
