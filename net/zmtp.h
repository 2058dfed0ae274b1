// ZMTP 3.0 (ZeroMQ's wire protocol, https://rfc.zeromq.org/spec/23/) as the receiving end
// of a connection sees it, with the NULL mechanism: the byte stream a DEALER socket sends
// cut into its greeting, its READY command and its message frames. Pure functions over
// bytes: the receiver (zmtp_receiver.h) feeds it what it reads, the fuzzer what it likes.
//
//   write(fd, ZmtpGreeting("ROUTER"));          // this end's greeting and READY, at once
//   ZmtpDecoder decoder;
//   std::string why;
//   if (!decoder.Consume(bytes, n, &sink, &why)) close(fd);   // sink: a ZmtpDecoder::Sink
//   uint8_t* dest;
//   if (decoder.BodyLeft(&dest) > 65536) ... read(fd, dest, ...) then decoder.Filled(got, &sink, &why);
//
// The decoder keeps at most one command (kMaxZmtpCommandBytes) and the greeting; a frame's
// bytes go where the sink says, or nowhere. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tally {

constexpr size_t kZmtpGreetingBytes = 64;
constexpr size_t kMaxZmtpCommandBytes = 1024;  // a READY with a 255-byte routing id fits

// This end's greeting (version 3.0, mechanism NULL) and its READY command naming socket_type.
std::string ZmtpGreeting(const std::string& socket_type);
// Appends one message frame (flags, 1- or 8-byte size, the bytes) to *out.
void ZmtpPutFrame(const void* data, size_t n, bool more, std::string* out);

class ZmtpDecoder {
 public:
  // What the decoder tells of the stream; each returns false (with *why) to end the
  // connection.
  class Sink {
   public:
    virtual ~Sink() = default;
    // The greeting and READY were read: the peer's socket type and routing id ("" if none).
    virtual bool OnReady(const std::string& socket_type, const std::string& identity, std::string* why) = 0;
    // A command after READY (a ZMTP 3.1 PING, say): ignored but counted by the sink.
    virtual bool OnCommand(std::string* why) = 0;
    // A frame of `size` bytes begins; `more`: another frame of its message follows. Set
    // *dest to where its first *keep (<= size) bytes go; the rest are read and dropped.
    virtual bool OnFrame(uint64_t size, bool more, uint8_t** dest, uint64_t* keep, std::string* why) = 0;
    // The frame begun last has been read whole.
    virtual bool OnFrameEnd(std::string* why) = 0;
  };

  // Takes the next n bytes of the stream. False if the stream is not ZMTP 3 with NULL
  // from a peer that does what the sink allows; the connection must end.
  bool Consume(const uint8_t* p, size_t n, Sink* sink, std::string* why);
  // While a frame's kept bytes are coming: how many are still to come and where (*dest),
  // so that the caller can read them from the socket straight into place, then call
  // Filled with how many it read there. 0 otherwise.
  size_t BodyLeft(uint8_t** dest) const;
  bool Filled(size_t n, Sink* sink, std::string* why);

 private:
  enum class State { kGreeting, kFlags, kSize, kCommand, kKeep, kSkip };
  bool Header(Sink* sink, std::string* why);
  bool EndOfBody(Sink* sink, std::string* why);
  bool ParseReady(Sink* sink, std::string* why);
  bool CheckGreeting(std::string* why) const;

  State state_ = State::kGreeting;
  std::string buffer_;        // the greeting, a size field or a command, as it comes
  uint8_t flags_ = 0;
  uint64_t size_ = 0;         // of the frame or command being read
  uint8_t* dest_ = nullptr;   // kKeep: where the frame's kept bytes go
  uint64_t keep_ = 0, kept_ = 0, skip_ = 0;
  bool ready_ = false;        // READY seen
};

}  // namespace tally
