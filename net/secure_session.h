// The two ends of a secure connection (docs/security.md): ClientSession on a node's
// sending socket to one peer, ServerSessions on its receiving socket for every peer that
// connects. They hold the handshake's state and the keys, and seal and open messages;
// the transport moves their bytes.
//
//   ClientSession c(&auth, "server 1");
//   send(c.Hello());                              // then, when the answer comes:
//   TALLY_RETURN_IF_ERROR(c.OnReply(reply.data(), reply.size()));
//   if (c.ready()) { sizes = c.SealedSizes(meta, data); ...; c.Seal(meta, data, outs); }
//
//   ServerSessions s(&auth);
//   std::string answer = s.OnHandshake(connection_id, frame, size);   // a HELLO
//   Status st = s.Open(connection_id, &frames, &peer, &answer);       // a sealed message
//
// Not thread-safe: a ClientSession is used under its peer's lock, ServerSessions by the
// receiving thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
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
  // A frame from the server: a WELCOME that answers the latest HELLO and proves the secret
  // makes the session ready, one to an older HELLO is ignored; a REFUSE ends the session
  // (an error saying why; after kNoSession a new HELLO may succeed). A WELCOME that fails
  // the proof, or anything else, is an error and changes nothing.
  Status OnReply(const void* data, size_t n);
  bool ready() const { return ready_; }
  const std::string& server() const { return server_; }

  // The byte sizes of the sealed frames of a message: the header and the Meta, then each
  // data frame. REQUIRES: ready().
  std::vector<size_t> SealedSizes(const std::string& meta, const std::vector<Tensor>& data) const;
  // Seals into outs (one buffer per frame, of SealedSizes' sizes); uses the next counter.
  void Seal(const std::string& meta, const std::vector<Tensor>& data, const std::vector<uint8_t*>& outs);

 private:
  const JobAuth* auth_;
  const std::string server_;
  std::string hello_;  // the latest HELLO sent
  tally::Hello sent_;
  bool ready_ = false;
  AeadKey key_{};
  uint64_t counter_ = 0;
};

class ServerSessions {
 public:
  explicit ServerSessions(const JobAuth* auth);
  // A HELLO on connection `id` (ZeroMQ's routing id): returns the answer, a WELCOME (and
  // the connection's keys replace any it had) or a REFUSE; *why says what was refused.
  std::string OnHandshake(const std::string& id, const void* data, size_t n, std::string* why);
  // Opens a sealed message in place. On success the frames hold the plain Meta and data
  // and *peer the name the connection proved. On failure nothing is changed that matters:
  // the message is dropped; *answer is a REFUSE to send back when the connection has no
  // session.
  Status Open(const std::string& id, std::vector<WireFrame>* frames, std::string* peer, std::string* answer);

 private:
  struct Connection {
    std::string peer;
    AeadKey key;
    uint64_t last = 0;  // the highest counter opened; 0: none yet, so not yet proved
    uint64_t used = 0;  // when last used, in handshakes and messages seen: eviction order
  };
  void MakeRoom();

  const JobAuth* auth_;
  std::map<std::string, Connection> connections_;
  uint64_t clock_ = 0;
};

}  // namespace tally
