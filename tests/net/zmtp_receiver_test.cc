// The transport's receiving end: the ZMTP decoder fed well-formed and hostile streams, and
// a live ZmtpReceiver (secure) faced with strangers on raw TCP sockets: frames with MORE
// set without end, a frame larger than the unproved budget, HELLO floods over the rate and
// over the connection cap, while a member's handshake and messages still get through.
// Memory is measured as the process's resident set (/proc/self/status).
#include "net/zmtp_receiver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "net/zmtp.h"

namespace tally {
namespace {

// ---- The decoder --------------------------------------------------------------------------

// A libzmq DEALER's greeting (version 3.1, NULL) and READY.
std::string DealerGreeting(const std::string& identity = "id", const std::string& mechanism = "NULL",
                           int major = 3, const std::string& socket_type = "DEALER") {
  std::string g(kZmtpGreetingBytes, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = static_cast<char>(major);
  g[11] = 1;
  std::memcpy(&g[12], mechanism.data(), mechanism.size());
  std::string ready = "\x05READY";
  for (const auto& [name, value] : {std::make_pair(std::string("Socket-Type"), socket_type),
                                    std::make_pair(std::string("Identity"), identity)}) {
    ready.push_back(static_cast<char>(name.size()));
    ready += name;
    for (int i = 3; i >= 0; --i) ready.push_back(static_cast<char>(value.size() >> (8 * i)));
    ready += value;
  }
  g.push_back('\x04');
  g.push_back(static_cast<char>(ready.size()));
  return g + ready;
}

std::string Frame(const std::string& body, bool more = false) {
  std::string out;
  ZmtpPutFrame(body.data(), body.size(), more, &out);
  return out;
}

// Records what the decoder reports; keeps up to `keep` bytes of each frame.
struct Recorder : ZmtpDecoder::Sink {
  std::string socket_type, identity;
  std::vector<std::string> frames;
  std::vector<bool> more;
  int commands = 0;
  uint64_t keep = ~uint64_t{0};
  std::string buffer;
  bool OnReady(const std::string& type, const std::string& id, std::string*) override {
    socket_type = type;
    identity = id;
    return true;
  }
  bool OnCommand(std::string*) override {
    ++commands;
    return true;
  }
  bool OnFrame(uint64_t size, bool m, uint8_t** dest, uint64_t* k, std::string*) override {
    buffer.assign(static_cast<size_t>(std::min(size, keep)), '\0');
    *dest = reinterpret_cast<uint8_t*>(buffer.data());
    *k = buffer.size();
    more.push_back(m);
    return true;
  }
  bool OnFrameEnd(std::string*) override {
    frames.push_back(buffer);
    return true;
  }
};

TEST(ZmtpDecoder, ReadsAGreetingReadyAndFramesHoweverTheyAreCut) {
  const std::string long_body(300, 'L');
  const std::string stream = DealerGreeting("abc") + Frame("hello", true) + Frame(long_body) +
                             std::string("\x04\x05\x04PING", 7) + Frame("");
  for (size_t piece : {stream.size(), size_t{1}, size_t{7}}) {
    ZmtpDecoder d;
    Recorder r;
    std::string why;
    for (size_t at = 0; at < stream.size(); at += piece) {
      const size_t n = std::min(piece, stream.size() - at);
      ASSERT_TRUE(d.Consume(reinterpret_cast<const uint8_t*>(stream.data()) + at, n, &r, &why)) << why;
    }
    EXPECT_EQ(r.socket_type, "DEALER");
    EXPECT_EQ(r.identity, "abc");
    EXPECT_EQ(r.frames, (std::vector<std::string>{"hello", long_body, ""})) << "pieces of " << piece;
    EXPECT_EQ(r.more, (std::vector<bool>{true, false, false}));
    EXPECT_EQ(r.commands, 1);
  }
}

TEST(ZmtpDecoder, KeepsOnlyWhatTheSinkAsksAndLetsTheCallerReadBodiesInPlace) {
  const std::string body(100000, 'b');
  const std::string head = DealerGreeting() + Frame(body).substr(0, 9);  // the frame's flags and 8-byte size
  ZmtpDecoder d;
  Recorder r;
  std::string why;
  ASSERT_TRUE(d.Consume(reinterpret_cast<const uint8_t*>(head.data()), head.size(), &r, &why)) << why;
  uint8_t* dest = nullptr;
  ASSERT_EQ(d.BodyLeft(&dest), body.size());
  std::memcpy(dest, body.data(), 60000);
  ASSERT_TRUE(d.Filled(60000, &r, &why));
  ASSERT_EQ(d.BodyLeft(&dest), body.size() - 60000);
  ASSERT_TRUE(d.Consume(reinterpret_cast<const uint8_t*>(body.data()), body.size() - 60000, &r, &why));
  ASSERT_EQ(r.frames.size(), 1u);
  EXPECT_EQ(r.frames[0], body);

  r.keep = 3;
  const std::string more = Frame("0123456789");
  ASSERT_TRUE(d.Consume(reinterpret_cast<const uint8_t*>(more.data()), more.size(), &r, &why));
  EXPECT_EQ(r.frames.back(), "012") << "the rest read and dropped";
}

TEST(ZmtpDecoder, RefusesWhatIsNotZmtp3WithNull) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"CURVE", DealerGreeting("id", "CURVE")},
      {"ZMTP 2", DealerGreeting("id", "NULL", 2)},
      {"not a greeting", std::string(64, 'x')},
      {"a frame before READY", DealerGreeting().substr(0, kZmtpGreetingBytes) + Frame("data")},
      {"a huge command", DealerGreeting().substr(0, kZmtpGreetingBytes) + std::string("\x06\0\0\0\0\0\0\x10\0", 9)},
      {"reserved flag bits", DealerGreeting() + "\x08\x01x"},
      {"a command with MORE", DealerGreeting() + "\x05\x01x"},
      {"a size with its top bit", DealerGreeting() + std::string("\x02\x80\0\0\0\0\0\0\0", 9)},
      {"READY without a Socket-Type",
       DealerGreeting().substr(0, kZmtpGreetingBytes) + std::string("\x04\x06\x05READY", 8)},
  };
  for (const auto& [what, stream] : cases) {
    ZmtpDecoder d;
    Recorder r;
    std::string why;
    EXPECT_FALSE(d.Consume(reinterpret_cast<const uint8_t*>(stream.data()), stream.size(), &r, &why)) << what;
    EXPECT_FALSE(why.empty()) << what;
  }
}

// ---- The receiver, live -------------------------------------------------------------------

int64_t ResidentKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A stranger on a raw TCP socket that speaks just enough ZMTP to be taken for a DEALER.
class RawPeer {
 public:
  explicit RawPeer(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{10, 0};  // reads never wait longer: a test that would hang fails instead
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    Send(DealerGreeting());
  }
  ~RawPeer() { close(fd_); }
  bool connected() const { return connected_; }

  // False once the receiver has closed the connection.
  bool Send(const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }

  // The next frame the receiver sent (after its greeting and READY); false on close or
  // after the read timeout.
  bool NextFrame(std::string* body) {
    if (!greeted_) {
      std::string greeting;
      if (!ReadExactly(kZmtpGreetingBytes + 2, &greeting)) return false;
      std::string ready;
      if (!ReadExactly(static_cast<uint8_t>(greeting.back()), &ready)) return false;
      greeted_ = true;
    }
    std::string head;
    if (!ReadExactly(2, &head)) return false;
    return ReadExactly(static_cast<uint8_t>(head[1]), body);  // answers are short frames
  }

  // Whether the receiver closes the connection within the read timeout.
  bool ClosedByReceiver() {
    char buffer[4096];
    while (true) {
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0) return false;  // the timeout
    }
  }

 private:
  bool ReadExactly(size_t n, std::string* out) {
    out->assign(n, '\0');
    for (size_t at = 0; at < n;) {
      const ssize_t got = recv(fd_, out->data() + at, n - at, 0);
      if (got <= 0) return false;
      at += static_cast<size_t>(got);
    }
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool greeted_ = false;
};

class ReceiverTest : public ::testing::Test {
 protected:
  ReceiverTest() : server_auth_{std::string(32, 's'), "server 0", JobNames{1, 1}}, responder_(&server_auth_) {
    ZmtpReceiver::Options options;
    options.responder = &responder_;
    options.rejected = &rejected_;
    EXPECT_TRUE(ZmtpReceiver::Start("127.0.0.1", 0, options, &receiver_, &port_).ok());
  }

  std::string Hello(const std::string& client) {
    const JobAuth auth{server_auth_.secret, client, server_auth_.job};
    ClientSession c(&auth, "server 0");
    return c.Hello();
  }

  // A member's whole exchange on a raw socket: HELLO, WELCOME, CONFIRM, one sealed message.
  void MemberGetsThrough() {
    const JobAuth auth{server_auth_.secret, "worker 0", server_auth_.job};
    ClientSession client(&auth, "server 0");
    RawPeer member(port_);
    ASSERT_TRUE(member.Send(Frame(client.Hello())));
    std::string welcome;
    ASSERT_TRUE(member.NextFrame(&welcome));
    ASSERT_TRUE(client.OnReply(welcome.data(), welcome.size()).ok());
    std::vector<size_t> sizes;
    ASSERT_TRUE(client.SealedSizes("a member's meta", {}, &sizes).ok());
    std::string sealed(sizes[0], '\0');
    client.Seal("a member's meta", {}, {reinterpret_cast<uint8_t*>(sealed.data())});
    ASSERT_TRUE(member.Send(Frame(client.confirm()) + Frame(sealed)));
    ZmtpReceiver::Incoming in;
    Status s = receiver_->Take(&in, 10000);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_NE(in.session, nullptr);
    s = in.session->Open(&in.frames);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(in.session->peer(), "worker 0");
    EXPECT_EQ(std::string(static_cast<const char*>(in.frames[0].data), in.frames[0].size), "a member's meta");
    for (WireFrame& f : in.frames) f.release();
  }

  JobAuth server_auth_;
  Responder responder_;
  std::atomic<int64_t> rejected_{0};
  std::unique_ptr<ZmtpReceiver> receiver_;
  int port_ = 0;
};

// ZeroMQ's ROUTER kept every frame of an unfinished multipart message: 10M one-byte frames
// grew a node by over 600 MB. Here the connection is closed after kUnprovedFrames.
TEST_F(ReceiverTest, EndlessFramesBeforeTheHandshakeAreCutOffAndMemoryStaysFlat) {
  const int64_t before_kb = ResidentKb();
  RawPeer stranger(port_);
  ASSERT_TRUE(stranger.connected());
  std::string batch;
  for (int i = 0; i < 20000; ++i) batch += std::string("\x01\x01x", 3);  // one-byte frames, MORE set
  int64_t frames = 0;
  while (frames < 10'000'000 && stranger.Send(batch)) frames += 20000;
  EXPECT_LT(frames, 10'000'000) << "the receiver never closed the connection";
  const int64_t grown_kb = ResidentKb() - before_kb;
  std::printf("a stranger sent %lld one-byte frames before its connection was closed; this process grew %lld KB\n",
              static_cast<long long>(frames), static_cast<long long>(grown_kb));
  EXPECT_LT(grown_kb, 20 << 10);
  EXPECT_EQ(receiver_->counters().over_budget, 1);

  // One frame that declares 1 GiB and keeps coming: closed past kUnprovedBytes.
  RawPeer big(port_);
  std::string head("\x02\0\0\0\0\x40\0\0\0", 9);
  ASSERT_TRUE(big.Send(head));
  const std::string chunk(1 << 16, 'z');
  size_t sent = 0;
  while (sent < (size_t{256} << 20) && big.Send(chunk)) sent += chunk.size();
  EXPECT_LT(sent, size_t{256} << 20);
  EXPECT_LT(ResidentKb() - before_kb, 20 << 10);
  EXPECT_EQ(receiver_->counters().over_budget, 2);
  MemberGetsThrough();
}

TEST_F(ReceiverTest, HandshakesOverTheRateAreDroppedAndTheConnectionClosedPastItsBudget) {
  RawPeer stranger(port_);
  const std::string hello = Frame(Hello("worker 0"));
  std::string burst;
  for (int i = 0; i < 20; ++i) burst += hello;
  ASSERT_TRUE(stranger.Send(burst));
  int answered = 0;
  std::string welcome;
  // The 20 arrive together: the burst is answered, the rest dropped (a token or two may
  // have come back meanwhile on a slow machine).
  while (answered < 20 && stranger.NextFrame(&welcome)) {
    ++answered;
    if (answered >= kHandshakeBurst) break;
  }
  EXPECT_EQ(answered, kHandshakeBurst);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (receiver_->counters().rate_limited < 20 - kHandshakeBurst - 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(receiver_->counters().rate_limited, 20 - kHandshakeBurst - 2);
  std::string more;
  for (int i = 0; i < kUnprovedFrames; ++i) more += hello;
  stranger.Send(more);
  EXPECT_TRUE(stranger.ClosedByReceiver()) << "over " << kUnprovedFrames << " frames without proving anything";
  EXPECT_EQ(receiver_->counters().proved, 0);
}

// Before, every HELLO naming a member made session state, and a full table dropped the
// oldest unproved session: a real member's. Now strangers' HELLOs leave nothing, and past
// kMaxUnprovedConnections the oldest idle connection goes, never one that proved itself.
TEST_F(ReceiverTest, AHelloFloodOnManyConnectionsDoesNotKeepAMemberOut) {
  const int64_t before_kb = ResidentKb();
  std::vector<std::unique_ptr<RawPeer>> strangers;
  const std::string hello = Frame(Hello("worker 0"));
  for (size_t i = 0; i < kMaxUnprovedConnections + 64; ++i) {
    strangers.push_back(std::make_unique<RawPeer>(port_));
    strangers.back()->Send(hello + hello);
  }
  MemberGetsThrough();
  for (auto& s : strangers) s->Send(hello);
  MemberGetsThrough();
  const ZmtpReceiver::Counters c = receiver_->counters();
  EXPECT_EQ(c.proved, 2);
  EXPECT_GE(c.evicted, 64);
  std::printf("%lld connections, %lld closed to make room; this process grew %lld KB\n",
              static_cast<long long>(c.connections), static_cast<long long>(c.evicted),
              static_cast<long long>(ResidentKb() - before_kb));
}

TEST_F(ReceiverTest, ASealedMessageWithoutASessionIsAnsweredWithARefuse) {
  RawPeer stale(port_);
  uint8_t header[kSealedHeaderBytes];
  PutSealedHeader({5, 2}, header);
  const std::string first = std::string(reinterpret_cast<char*>(header), sizeof header) + std::string(40, 'm');
  ASSERT_TRUE(stale.Send(Frame(first, true) + Frame(std::string(1000, 'd'))));
  std::string answer;
  ASSERT_TRUE(stale.NextFrame(&answer));
  RefuseReason why;
  ASSERT_TRUE(ParseRefuse(answer.data(), answer.size(), &why));
  EXPECT_EQ(why, RefuseReason::kNoSession);
  EXPECT_GE(rejected_, 1);
  ZmtpReceiver::Incoming in;
  EXPECT_FALSE(receiver_->Take(&in, 100).ok()) << "nothing of it reaches Recv";
}

}  // namespace
}  // namespace tally
