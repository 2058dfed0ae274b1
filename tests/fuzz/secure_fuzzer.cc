// libFuzzer harness: hostile bytes at the secure transport's receiving end, before any key
// could have been proved (docs/fuzzing.md, "secure").
//
// Input: a sequence of messages, each a connection byte (one of four connections), a frame
// count byte (1 to 4) and that many frames (a little-endian 16-bit length, then the bytes).
// A one-frame message of type HELLO goes to ServerSessions::OnHandshake, any other message
// to ServerSessions::Open, and every frame also to ClientSession::OnReply. Connection 0 has
// completed a real handshake with fresh random nonces, so the fuzzer works against live
// keys it cannot know.
//
// Besides crashes and sanitizer reports, the harness checks what authentication promises:
// no input opens (that would be a forgery), no reply makes the client ready (the client's
// nonce is fresh too), and every handshake answer parses as a WELCOME or a REFUSE.
#include <cstdint>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "net/secure_session.h"
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

void Run(FuzzInput* in) {
  static const JobAuth server_auth = Auth("server 0"), worker_auth = Auth("worker 1");
  ServerSessions server(&server_auth);
  ClientSession live(&worker_auth, "server 0");
  const std::string hello = live.Hello();
  std::string why;
  const std::string welcome = server.OnHandshake("c0", hello.data(), hello.size(), &why);
  CHECK(live.OnReply(welcome.data(), welcome.size()).ok() && live.ready());
  ClientSession client(&worker_auth, "server 0");
  client.Hello();

  while (!in->empty()) {
    const std::string conn = "c" + std::to_string(in->Byte() % 4);
    const int count = 1 + in->Byte() % 4;
    std::vector<std::string> bytes;
    for (int i = 0; i < count; ++i) bytes.emplace_back(in->Bytes(in->Le16()));
    for (const std::string& b : bytes) {
      client.OnReply(b.data(), b.size()).ok();
      CHECK(!client.ready()) << "a reply nobody could have made with the client's fresh nonce made it ready";
    }
    if (count == 1 && SecureTypeOf(bytes[0].data(), bytes[0].size()) == uint8_t(SecureType::kHello)) {
      const std::string answer = server.OnHandshake(conn, bytes[0].data(), bytes[0].size(), &why);
      Welcome w;
      RefuseReason r;
      CHECK(answer.empty() || ParseWelcome(answer.data(), answer.size(), &w) ||
            ParseRefuse(answer.data(), answer.size(), &r));
      continue;
    }
    // Exactly sized copies, so that AddressSanitizer sees any read past a frame.
    std::vector<std::vector<char>> copies;
    std::vector<WireFrame> frames;
    for (const std::string& b : bytes) copies.emplace_back(b.begin(), b.end());
    for (auto& c : copies) frames.push_back({c.data(), c.size(), nullptr});
    std::string peer, answer;
    Status s = server.Open(conn, &frames, &peer, &answer);
    CHECK(!s.ok()) << "forged bytes opened as a message from " << peer;
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
