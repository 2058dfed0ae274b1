// The two ends of a secure connection (docs/security.md): ClientSession on a node's
// sending socket to one peer; on its receiving end a Responder that answers handshakes
// while keeping nothing for them, and a ServerSession for each connection that proved the
// secret. They hold the handshake's state and the keys, and seal and open messages; the
// transport moves their bytes.
//
//   ClientSession c(&auth, "server 1");
//   send(c.Hello());                              // then, when the answer comes:
//   TALLY_RETURN_IF_ERROR(c.OnReply(reply.data(), reply.size()));
//   if (c.ready()) { send(c.confirm()); ...; TALLY_RETURN_IF_ERROR(c.SealedSizes(meta, data, &sizes)); c.Seal(meta, data, outs); }
//
//   Responder r(&auth);                                              // the receiving end
//   std::string welcome = r.OnHello(connection, hello, n, CookieWindow(now), &why);   // stores nothing
//   std::shared_ptr<ServerSession> s;
//   TALLY_RETURN_IF_ERROR(r.OnConfirm(connection, confirm, n, CookieWindow(now), &s));
//   TALLY_RETURN_IF_ERROR(s->Open(&frames));                        // each later sealed message
//
// Not thread-safe: a ClientSession is used under its peer's lock, the Responder by the
// receiving thread, a ServerSession by the thread that opens messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "net/aead.h"
#include "net/secure_frames.h"
#include "net/transport.h"

namespace tally {

class ClientSession {
 public:
  ClientSession(const JobAuth* auth, std::string server);
  // A new HELLO with a fresh nonce; forgets any keys, so nothing is sealed until the
  // server answers this one.
  std::string Hello();
  // The latest HELLO, to send again while no answer comes: every answer to it is as good.
  const std::string& hello() const { return hello_; }
  // A frame from the server: a WELCOME that answers the latest HELLO and proves the secret
  // makes the session ready, one to an older HELLO is ignored; a REFUSE ends the session
  // (an error saying why; after kNoSession a new HELLO may succeed). A WELCOME that fails
  // the proof, or anything else, is an error and changes nothing.
  Status OnReply(const void* data, size_t n);
  bool ready() const { return ready_; }
  const std::string& server() const { return server_; }
  // The CONFIRM that goes right after the WELCOME made the session ready, before any sealed
  // message: the server keeps the session only once it verifies. REQUIRES: ready().
  const std::string& confirm() const { return confirm_; }

  // The byte sizes of the sealed frames of a message: the header and the Meta, then each
  // data frame; an error, before anything is allocated, for a message that cannot be
  // sealed (CheckSealable: a frame over 4 GiB). REQUIRES: ready().
  Status SealedSizes(const std::string& meta, const std::vector<Tensor>& data, std::vector<size_t>* sizes) const;
  // Seals into outs (one buffer per frame, of SealedSizes' sizes); uses the next counter.
  void Seal(const std::string& meta, const std::vector<Tensor>& data, const std::vector<uint8_t*>& outs);

 private:
  const JobAuth* auth_;
  const std::string server_;
  std::string hello_;  // the latest HELLO sent
  tally::Hello sent_;
  std::string confirm_;
  bool ready_ = false;
  AeadKey key_{};
  uint64_t counter_ = 0;
};

// The cookie's coarse clock: a CONFIRM is accepted in the window of its WELCOME and the
// next, so 30 to 60 s after it. A monotonic clock: only this process compares them.
constexpr int kCookieWindowSeconds = 30;
uint64_t CookieWindow(std::chrono::steady_clock::time_point t);

// The keys of one connection that proved the secret, and the last counter it used.
class ServerSession {
 public:
  ServerSession(std::string peer, const AeadKey& key, const uint8_t client_nonce[kNonceBytes]);
  const std::string& peer() const { return peer_; }
  const uint8_t* client_nonce() const { return client_nonce_; }
  // Where a data part may be opened instead of in place (net/landing.h): given the opened
  // Meta (part 0's plain bytes), a data part's index and its plain size, a buffer of that
  // size, or null. It may receive unauthenticated bytes if a later record fails.
  using Place = std::function<uint8_t*(const uint8_t* meta, size_t meta_bytes, size_t part, size_t plain)>;
  // Opens a sealed message in place (or a data part where `place` says): on success the
  // frames hold the plain Meta and data, a placed part's frame pointing at its buffer (its
  // sealed block freed). On failure nothing is changed that matters: the message is dropped.
  Status Open(std::vector<WireFrame>* frames, const Place& place = nullptr);

 private:
  const std::string peer_;
  const AeadKey key_;
  uint8_t client_nonce_[kNonceBytes];
  uint64_t last_ = 0;  // the highest counter opened
};

class Responder {
 public:
  explicit Responder(const JobAuth* auth);  // draws the cookie's key
  // A HELLO on connection `connection` (a number the receiver never gives twice): returns
  // the answer, a WELCOME whose server nonce is the cookie of (window, connection, client
  // nonce, client name), or a REFUSE; *why says what was refused. Keeps nothing.
  std::string OnHello(uint64_t connection, const void* data, size_t n, uint64_t window, std::string* why);
  // A CONFIRM on the same connection: derives the cookie and the keys again and, if its
  // window is `window` or the one before and its tag verifies, *session is the
  // connection's new session.
  Status OnConfirm(uint64_t connection, const void* data, size_t n, uint64_t window,
                   std::shared_ptr<ServerSession>* session);

 private:
  Status CheckNames(const std::string& client, const std::string& server, RefuseReason* why) const;
  void Cookie(uint64_t connection, uint64_t window, const uint8_t client_nonce[kNonceBytes], const std::string& client,
              uint8_t server_nonce[kNonceBytes]);

  const JobAuth* auth_;
  const std::unordered_set<std::string> members_;  // every name of the job, looked up per HELLO
  std::unique_ptr<HmacSha256> cookie_;
};

}  // namespace tally
