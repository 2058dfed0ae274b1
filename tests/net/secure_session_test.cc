// The secure transport's handshake and sealed messages, without sockets: a ClientSession
// and ServerSessions exchange bytes directly, and the tests alter those bytes on the way:
// another job's secret, replayed, reordered, bit-flipped, truncated and reshuffled frames.
#include "net/secure_session.h"

#include <cstring>

#include <gtest/gtest.h>

namespace tally {
namespace {

JobAuth Member(const std::string& secret, const std::string& name) { return JobAuth{secret, name, JobNames{1, 2}}; }

// A sealed message as the wire carries it: one buffer per frame.
using Wire = std::vector<std::string>;

class SecureSessionTest : public ::testing::Test {
 protected:
  SecureSessionTest()
      : worker_auth_(Member(std::string(32, 'k'), "worker 1")),
        server_auth_(Member(std::string(32, 'k'), "server 0")),
        client_(&worker_auth_, "server 0"),
        server_(&server_auth_) {}

  void Handshake() {
    const std::string hello = client_.Hello();
    std::string why;
    const std::string welcome = server_.OnHandshake("conn", hello.data(), hello.size(), &why);
    ASSERT_TRUE(why.empty()) << why;
    ASSERT_TRUE(client_.OnReply(welcome.data(), welcome.size()).ok());
    ASSERT_TRUE(client_.ready());
  }

  Wire Seal(const std::string& meta, const std::vector<Tensor>& data) {
    const std::vector<size_t> sizes = client_.SealedSizes(meta, data);
    Wire wire;
    for (size_t n : sizes) wire.emplace_back(n, '\0');
    std::vector<uint8_t*> outs;
    for (std::string& f : wire) outs.push_back(reinterpret_cast<uint8_t*>(f.data()));
    client_.Seal(meta, data, outs);
    return wire;
  }

  // Opens a copy of the wire; on success *plain holds the plain frames.
  Status Open(Wire wire, std::vector<std::string>* plain = nullptr, std::string* answer = nullptr,
              const std::string& conn = "conn") {
    std::vector<WireFrame> frames;
    for (std::string& f : wire) frames.push_back({f.data(), f.size(), nullptr});
    std::string peer, ignored;
    Status s = server_.Open(conn, &frames, &peer, answer != nullptr ? answer : &ignored);
    if (s.ok()) {
      EXPECT_EQ(peer, "worker 1");
      if (plain != nullptr) {
        plain->clear();
        for (const WireFrame& f : frames) plain->emplace_back(static_cast<const char*>(f.data), f.size);
      }
    }
    return s;
  }

  static Tensor Values(int64_t n, float first) {
    Tensor t = Tensor::Empty({n}, DType::kF32);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = first + static_cast<float>(i);
    return t;
  }

  JobAuth worker_auth_, server_auth_;
  ClientSession client_;
  ServerSessions server_;
};

TEST_F(SecureSessionTest, SealedMessagesOpenToTheSameBytesSmallAndLarge) {
  Handshake();
  // 0 bytes, one record, and a frame of several records (opened by the crypto threads).
  const std::vector<Tensor> data{Values(0, 0), Values(3, 1), Values((3 * kRecordBytes) / 4 + 5, 7)};
  std::vector<std::string> plain;
  ASSERT_TRUE(Open(Seal("meta bytes", data), &plain).ok());
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_EQ(plain[0], "meta bytes");
  for (size_t i = 0; i < data.size(); ++i) {
    ASSERT_EQ(plain[i + 1].size(), data[i].nbytes());
    EXPECT_EQ(std::memcmp(plain[i + 1].data(), data[i].raw_data(), data[i].nbytes()), 0) << "frame " << i + 1;
  }
}

TEST_F(SecureSessionTest, ReplayedAndReorderedMessagesAreDropped) {
  Handshake();
  const Wire first = Seal("first", {Values(4, 0)}), second = Seal("second", {Values(4, 1)});
  ASSERT_TRUE(Open(first).ok());
  Status replay = Open(first);
  EXPECT_FALSE(replay.ok());
  EXPECT_NE(replay.message().find("replayed"), std::string::npos) << replay;
  ASSERT_TRUE(Open(second).ok());
  const Wire third = Seal("third", {}), fourth = Seal("fourth", {});
  ASSERT_TRUE(Open(fourth).ok());
  EXPECT_FALSE(Open(third).ok()) << "an older message after a newer one";
}

TEST_F(SecureSessionTest, AnyAlteredByteFailsAuthenticationAndChangesNothing) {
  Handshake();
  const Wire good = Seal("meta", {Values(100, 3)});
  // Every byte of the header's counter and parts, the Meta, its tag, the data and its tag.
  for (size_t frame = 0; frame < good.size(); ++frame) {
    for (size_t at = frame == 0 ? 8 : 0; at < good[frame].size(); ++at) {
      Wire bad = good;
      bad[frame][at] ^= 0x01;
      ASSERT_FALSE(Open(bad).ok()) << "frame " << frame << " byte " << at;
    }
  }
  EXPECT_TRUE(Open(good).ok()) << "the altered copies must not have used up its counter";
}

TEST_F(SecureSessionTest, TruncatedDroppedOrSwappedFramesAreRefused) {
  Handshake();
  const Wire good = Seal("meta", {Values(64, 0), Values(64, 100)});
  Wire cut = good;
  cut[2].pop_back();
  EXPECT_FALSE(Open(cut).ok()) << "a frame one byte short";
  cut = good;
  cut[1].resize(cut[1].size() - kTagBytes);
  EXPECT_FALSE(Open(cut).ok()) << "a frame without its tag";
  Wire fewer = good;
  fewer.pop_back();
  Status s = Open(fewer);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("frames where the header says"), std::string::npos) << s;
  Wire swapped = good;
  std::swap(swapped[1], swapped[2]);
  EXPECT_FALSE(Open(swapped).ok()) << "two data frames of one size, swapped";
  EXPECT_TRUE(Open(good).ok());
}

TEST_F(SecureSessionTest, AnotherJobsSecretNeitherHandshakesNorSealsAcceptedMessages) {
  const JobAuth outsider_auth = Member(std::string(32, 'x'), "worker 1");
  ClientSession outsider(&outsider_auth, "server 0");
  const std::string hello = outsider.Hello();
  std::string why;
  const std::string welcome = server_.OnHandshake("outsider", hello.data(), hello.size(), &why);
  Status s = outsider.OnReply(welcome.data(), welcome.size());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not hold this job's secret"), std::string::npos) << s;
  EXPECT_FALSE(outsider.ready());

  // Keys it derives itself from the server's nonce and its own secret: the server drops
  // what it seals.
  Hello h;
  ASSERT_TRUE(ParseHello(hello.data(), hello.size(), &h));
  Welcome w;
  ASSERT_TRUE(ParseWelcome(welcome.data(), welcome.size(), &w));
  const ConnectionKeys wrong = DeriveConnectionKeys(outsider_auth.secret, "worker 1", "server 0", h.client_nonce,
                                                    w.server_nonce);
  std::string frame(kSealedHeaderBytes + SealedBytes(4), '\0');
  auto* out = reinterpret_cast<uint8_t*>(frame.data());
  PutSealedHeader({1, 1}, out);
  SealParts(wrong.client_to_server, out, {{"meta", 4, out + kSealedHeaderBytes}});
  s = Open({frame}, nullptr, nullptr, "outsider");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fails authentication"), std::string::npos) << s;
}

TEST_F(SecureSessionTest, UnknownConnectionsAndStrangersAreRefusedWithAReason) {
  Handshake();
  std::string answer;
  Status s = Open(Seal("meta", {}), nullptr, &answer, "a connection never introduced");
  EXPECT_FALSE(s.ok());
  RefuseReason why;
  ASSERT_TRUE(ParseRefuse(answer.data(), answer.size(), &why));
  EXPECT_EQ(why, RefuseReason::kNoSession);
  // The client learns it must introduce itself again; a new handshake works.
  EXPECT_FALSE(client_.OnReply(answer.data(), answer.size()).ok());
  EXPECT_FALSE(client_.ready());
  Handshake();
  EXPECT_TRUE(Open(Seal("again", {})).ok());

  for (const auto& [client, server] : {std::pair<std::string, std::string>{"worker 9", "server 0"},
                                       {"worker 0", "server 1"}}) {
    const JobAuth auth = Member(worker_auth_.secret, client);
    ClientSession c(&auth, server);
    const std::string hello = c.Hello();
    std::string reason;
    const std::string refuse = server_.OnHandshake("stranger", hello.data(), hello.size(), &reason);
    EXPECT_FALSE(reason.empty()) << client << " -> " << server;
    EXPECT_FALSE(c.OnReply(refuse.data(), refuse.size()).ok());
  }
}

TEST_F(SecureSessionTest, AWelcomeToAnOlderHelloIsIgnored) {
  const std::string old_hello = client_.Hello();
  std::string why;
  const std::string old_welcome = server_.OnHandshake("conn", old_hello.data(), old_hello.size(), &why);
  Handshake();  // a newer HELLO, answered
  ASSERT_TRUE(client_.OnReply(old_welcome.data(), old_welcome.size()).ok());
  EXPECT_TRUE(client_.ready());
  EXPECT_TRUE(Open(Seal("after", {})).ok());
}

// A WELCOME replayed after the handshake must not start the counter again: that would
// seal two messages under one key and one nonce.
TEST_F(SecureSessionTest, AReplayedWelcomeDoesNotRestartTheCounter) {
  const std::string hello = client_.Hello();
  std::string why;
  const std::string welcome = server_.OnHandshake("conn", hello.data(), hello.size(), &why);
  ASSERT_TRUE(client_.OnReply(welcome.data(), welcome.size()).ok());
  const Wire first = Seal("first", {});
  ASSERT_TRUE(client_.OnReply(welcome.data(), welcome.size()).ok());
  const Wire second = Seal("second", {});
  SealedHeader a, b;
  ASSERT_TRUE(ParseSealedHeader(first[0].data(), first[0].size(), &a));
  ASSERT_TRUE(ParseSealedHeader(second[0].data(), second[0].size(), &b));
  EXPECT_EQ(b.counter, a.counter + 1);
  EXPECT_TRUE(Open(first).ok());
  EXPECT_TRUE(Open(second).ok());
}

TEST(SecureFrames, SealedSizesInvertAndOddSizesAreRefused) {
  for (size_t n : {size_t{0}, size_t{1}, kRecordBytes - 1, kRecordBytes, kRecordBytes + 1, 5 * kRecordBytes + 3}) {
    size_t back = 0;
    ASSERT_TRUE(PlainBytes(SealedBytes(n), &back)) << n;
    EXPECT_EQ(back, n);
  }
  size_t n;
  for (size_t bad : {size_t{0}, size_t{15}, kRecordBytes + kTagBytes + 1, kRecordBytes + kTagBytes + 16}) {
    EXPECT_FALSE(PlainBytes(bad, &n)) << bad;
  }
}

TEST(SecureFrames, HandshakeMessagesRoundTripAndGarbageDoesNotParse) {
  Hello h;
  std::memset(h.client_nonce, 7, kNonceBytes);
  h.client = "worker 3";
  h.server = "server 0";
  const std::string bytes = EncodeHello(h);
  Hello back;
  ASSERT_TRUE(ParseHello(bytes.data(), bytes.size(), &back));
  EXPECT_EQ(back.client, "worker 3");
  EXPECT_EQ(back.server, "server 0");
  for (size_t cut = 0; cut < bytes.size(); ++cut) EXPECT_FALSE(ParseHello(bytes.data(), cut, &back)) << cut;
  EXPECT_FALSE(ParseHello((bytes + "x").data(), bytes.size() + 1, &back));
  Welcome w;
  EXPECT_FALSE(ParseWelcome(bytes.data(), bytes.size(), &w));
  SealedHeader sh;
  EXPECT_FALSE(ParseSealedHeader(bytes.data(), bytes.size(), &sh));
  uint8_t zero[kSealedHeaderBytes];
  PutSealedHeader({0, 1}, zero);
  EXPECT_FALSE(ParseSealedHeader(zero, sizeof zero, &sh)) << "counter 0 is never sent";
}

}  // namespace
}  // namespace tally
