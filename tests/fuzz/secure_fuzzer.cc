// libFuzzer harness: hostile bytes at the secure transport's receiving end, before any key
// could have been proved (docs/fuzzing.md, "secure").
//
// Input: a sequence of messages, each a connection byte (one of four connections), a frame
// count byte (1 to 4) and that many frames (a little-endian 16-bit length, then the bytes).
// A one-frame message of type HELLO goes to Responder::OnHello, one of type CONFIRM to
// Responder::OnConfirm, any other message to the session of connection 0, which completed
// a real handshake with fresh random nonces (so the fuzzer works against live keys it
// cannot know); every frame also goes to ClientSession::OnReply, and every frame's bytes,
// one after another, to a ZmtpDecoder that has read a DEALER's greeting (the stream a
// stranger sends before it has proved anything; a decoder that refuses is replaced).
//
// Besides crashes and sanitizer reports, the harness checks what authentication promises:
// no input opens (that would be a forgery), no CONFIRM makes a session, no reply makes the
// client ready (the client's nonce is fresh too), every answer to a HELLO parses as a
// WELCOME or a REFUSE; and of the decoder, that it never keeps more of a frame than asked.
#include <cstdint>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "net/secure_session.h"
#include "net/zmtp.h"
#include "tests/fuzz/fuzz_input.h"

namespace tally {
namespace fuzz {
namespace {

JobAuth Auth(const std::string& self) {
  JobAuth a;
  a.secret = std::string(32, '\x5a');
  a.self = self;
  a.job.num_servers = 1;
  a.job.num_workers = 2;
  return a;
}

constexpr uint64_t kWindow = 5;

// Keeps at most kMaxHandshakeBytes of each frame, as the receiver does before a
// connection has proved the secret.
class KeepingSink : public ZmtpDecoder::Sink {
 public:
  bool OnReady(const std::string&, const std::string&, std::string*) override { return true; }
  bool OnCommand(std::string*) override { return true; }
  bool OnFrame(uint64_t size, bool, uint8_t** dest, uint64_t* keep, std::string*) override {
    *dest = kept_;
    *keep = std::min<uint64_t>(size, sizeof kept_);
    return true;
  }
  bool OnFrameEnd(std::string*) override { return true; }

 private:
  uint8_t kept_[kMaxHandshakeBytes];
};

std::string DealerGreeting() {
  std::string g(kZmtpGreetingBytes, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = 3;
  g.replace(12, 4, "NULL");
  const std::string ready("\x05READY\x0bSocket-Type\0\0\0\x06" "DEALER", 28);
  return g + '\x04' + static_cast<char>(ready.size()) + ready;
}

void Decode(std::unique_ptr<ZmtpDecoder>* decoder, KeepingSink* sink, const std::string& bytes) {
  static const std::string greeting = DealerGreeting();
  std::string why;
  if (*decoder == nullptr) {
    *decoder = std::make_unique<ZmtpDecoder>();
    CHECK((*decoder)->Consume(reinterpret_cast<const uint8_t*>(greeting.data()), greeting.size(), sink, &why)) << why;
  }
  if (!(*decoder)->Consume(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), sink, &why)) {
    CHECK(!why.empty()) << "a refusal without a reason";
    decoder->reset();
  }
}

void Run(FuzzInput* in) {
  static const JobAuth server_auth = Auth("server 0"), worker_auth = Auth("worker 1");
  Responder responder(&server_auth);
  ClientSession live(&worker_auth, "server 0");
  const std::string hello = live.Hello();
  std::string why;
  const std::string welcome = responder.OnHello(0, hello.data(), hello.size(), kWindow, &why);
  CHECK(live.OnReply(welcome.data(), welcome.size()).ok() && live.ready());
  std::shared_ptr<ServerSession> session;
  CHECK(responder.OnConfirm(0, live.confirm().data(), live.confirm().size(), kWindow, &session).ok());
  ClientSession client(&worker_auth, "server 0");
  client.Hello();
  std::unique_ptr<ZmtpDecoder> decoder;
  KeepingSink sink;

  while (!in->empty()) {
    const uint64_t conn = in->Byte() % 4;
    const int count = 1 + in->Byte() % 4;
    std::vector<std::string> bytes;
    for (int i = 0; i < count; ++i) bytes.emplace_back(in->Bytes(in->Le16()));
    for (const std::string& b : bytes) {
      client.OnReply(b.data(), b.size()).ok();
      CHECK(!client.ready()) << "a reply nobody could have made with the client's fresh nonce made it ready";
      Decode(&decoder, &sink, b);
    }
    const uint8_t type = count == 1 ? SecureTypeOf(bytes[0].data(), bytes[0].size()) : 0;
    if (type == uint8_t(SecureType::kHello)) {
      const std::string answer = responder.OnHello(conn, bytes[0].data(), bytes[0].size(), kWindow, &why);
      Welcome w;
      RefuseReason r;
      CHECK(answer.empty() || ParseWelcome(answer.data(), answer.size(), &w) ||
            ParseRefuse(answer.data(), answer.size(), &r));
      continue;
    }
    if (type == uint8_t(SecureType::kConfirm)) {
      std::shared_ptr<ServerSession> forged;
      Status s = responder.OnConfirm(conn, bytes[0].data(), bytes[0].size(), kWindow, &forged);
      CHECK(!s.ok() && forged == nullptr) << "a CONFIRM nobody could have made made a session";
      continue;
    }
    // Exactly sized copies, so that AddressSanitizer sees any read past a frame.
    std::vector<std::vector<char>> copies;
    std::vector<WireFrame> frames;
    for (const std::string& b : bytes) copies.emplace_back(b.begin(), b.end());
    for (auto& c : copies) frames.push_back({c.data(), c.size(), nullptr});
    Status s = session->Open(&frames);
    CHECK(!s.ok()) << "forged bytes opened as a message from " << session->peer();
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_logtostderr = true;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::fuzz::FuzzInput in(data, size);
  tally::fuzz::Run(&in);
  return 0;
}
