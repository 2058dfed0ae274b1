#include "net/zmtp_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <glog/logging.h>

#include "base/host_blocks.h"
#include "net/transport.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kDirectReadBytes = 64 << 10;   // a frame with this much to come is read in place
constexpr size_t kReadTurnBytes = 4 << 20;      // then the next connection's turn
constexpr size_t kMaxPendingOutput = 64 << 10;  // handshake answers a peer has not read
constexpr size_t kMaxFramesPerMessage = kMaxSlicesPerMessage + 1;
constexpr size_t kMaxLandingMetaBytes = 4 << 10;  // an answer's Meta is a few dozen bytes

// One whole single-frame message, as the peer's DEALER reads it.
std::string ZmtpFrameOf(const std::string& body) {
  std::string out;
  ZmtpPutFrame(body.data(), body.size(), /*more=*/false, &out);
  return out;
}

}  // namespace

void ReleaseFrames(std::vector<WireFrame>* frames) {
  for (WireFrame& f : *frames) {
    if (f.release) f.release();
  }
  frames->clear();
}

Connection::~Connection() {
  ReleaseFrames(&frames_);
  close(fd_);
}

bool Connection::Read(uint8_t* staging, std::string* why) {
  for (size_t turn = 0; turn < kReadTurnBytes;) {
    if (proved_ && owner_->reading_paused()) return true;
    uint8_t* dest = nullptr;
    const size_t left = decoder_.BodyLeft(&dest);
    const bool direct = left >= kDirectReadBytes;
    const ssize_t got = direct ? read(fd_, dest, std::min(left, kReadTurnBytes)) : read(fd_, staging, kZmtpStagingBytes);
    if (got == 0) {
      *why = "";  // the peer closed it: nothing to report
      return false;
    }
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      *why = std::string("read: ") + std::strerror(errno);
      return false;
    }
    turn += static_cast<size_t>(got);
    if (!proved_ && (unproved_bytes_ += static_cast<size_t>(got)) > kUnprovedBytes) {
      over_budget_ = true;
      *why = "it sent over " + std::to_string(kUnprovedBytes) + " bytes without proving the job's secret";
      return false;
    }
    const bool ok = direct ? decoder_.Filled(static_cast<size_t>(got), this, why)
                           : decoder_.Consume(staging, static_cast<size_t>(got), this, why);
    if (!ok) return false;
  }
  return true;
}

bool Connection::Send(const std::string& bytes, std::string* why) {
  out_ += bytes;
  return Flush(why);
}

bool Connection::Flush(std::string* why) {
  while (!out_.empty()) {
    const ssize_t n = send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      *why = std::string("send: ") + std::strerror(errno);
      return false;
    }
    out_.erase(0, static_cast<size_t>(n));
  }
  if (out_.size() > kMaxPendingOutput) {
    *why = "it does not read the answers to its handshakes";
    return false;
  }
  owner_->Watch(this);
  return true;
}

bool Connection::OnReady(const std::string& socket_type, const std::string& /*identity*/, std::string* why) {
  if (socket_type != "DEALER") {
    *why = "a ZeroMQ " + socket_type + " socket (nodes send from DEALER sockets)";
    return false;
  }
  return true;
}

bool Connection::CountUnproved(std::string* why) {
  if (proved_ || ++unproved_frames_ <= static_cast<size_t>(kUnprovedFrames)) return true;
  over_budget_ = true;
  *why = "it sent over " + std::to_string(kUnprovedFrames) + " frames without proving the job's secret";
  return false;
}

bool Connection::OnCommand(std::string* why) { return CountUnproved(why); }

bool Connection::OnFrame(uint64_t size, bool more, uint8_t** dest, uint64_t* keep, std::string* why) {
  more_ = more;
  if (!proved_) {
    if (!CountUnproved(why)) return false;
    // Only a handshake is taken from it, so nothing but the first frame's start is kept.
    if (index_++ == 0) {
      first_size_ = size;
      *dest = first_;
      *keep = std::min<uint64_t>(size, kMaxHandshakeBytes);
    }
    return true;
  }
  if (index_++ >= kMaxFramesPerMessage) {
    *why = "a message of more than " + std::to_string(kMaxFramesPerMessage) + " frames";
    return false;
  }
  if (size > owner_->max_frame_bytes()) {
    *why = "a frame of " + std::to_string(size) + " bytes, over the " + std::to_string(owner_->max_frame_bytes()) +
           " allowed";
    return false;
  }
  if (index_ == 2 && landing_ready_) {  // an answer's one data frame: into its array?
    landing_ready_ = false;
    if (void* p = size > 0 ? Landings::Get().Claim(landing_, size, landing_dtype_) : nullptr) {
      const LandingKey key = landing_;
      frames_.push_back({p, size, [key] { Landings::Get().Landed(key); }});  // the connection closed mid-frame
      landing_reading_ = true;
      *dest = static_cast<uint8_t*>(p);
      *keep = size;
      return true;
    }
  }
  // Received frames come from the host block cache: a step receives the same sizes every
  // time, and a fresh multi-MB buffer would be faulted in page by page.
  void* p = size > 0 ? TryAllocateHostBlock(size) : nullptr;
  if (size > 0 && p == nullptr) {
    *why = "no memory for a frame of " + std::to_string(size) + " bytes";
    return false;
  }
  frames_.push_back({p, size, [p, size] { ReleaseHostBlock(p, size); }});
  *dest = static_cast<uint8_t*>(p);
  *keep = size;
  return true;
}

bool Connection::OnFrameEnd(std::string* why) {
  if (landing_reading_) {  // the frame is in its array, which the requester owns
    landing_reading_ = false;
    frames_.back().release();
    frames_.back().release = nullptr;
  }
  if (more_) {
    if (index_ == 1 && proved_) NoteLanding();
    return true;
  }
  landing_ready_ = false;
  const size_t count = index_;
  index_ = 0;
  if (!proved_) return UnprovedMessage(count, why);
  std::vector<WireFrame> frames = std::move(frames_);
  frames_.clear();
  const uint8_t type = frames.size() == 1 ? SecureTypeOf(frames[0].data, frames[0].size) : 0;
  if (owner_->responder() != nullptr && frames[0].size <= kMaxHandshakeBytes &&
      (type == uint8_t(SecureType::kHello) || type == uint8_t(SecureType::kConfirm))) {
    const bool ok = Handshake(type, frames[0].data, frames[0].size, why);
    ReleaseFrames(&frames);
    return ok;
  }
  owner_->Enqueue({std::move(frames), session_, from_});
  return true;
}

void Connection::NoteLanding() {
  landing_ready_ = false;
  const int port = owner_->landing_port();
  if (frames_.size() != 1 || frames_[0].size > kMaxLandingMetaBytes || !Landings::Get().Any(port)) return;
  wire::Meta meta;  // read again by DecodeMessage: a small price next to copying the values
  if (!meta.ParseFromArray(frames_[0].data, static_cast<int>(frames_[0].size))) return;
  if (!AnswerMayLand(port, meta, &landing_)) return;
  landing_dtype_ = meta.dtype();
  landing_ready_ = true;
}

// A whole message on a connection that has not proved the secret: a HELLO or a CONFIRM is
// answered; a sealed message (its sender holds a session this receiver does not: it
// restarted, or the connection is new) gets a REFUSE so that its sender makes the handshake.
bool Connection::UnprovedMessage(size_t frames, std::string* why) {
  const size_t kept = static_cast<size_t>(std::min<uint64_t>(first_size_, kMaxHandshakeBytes));
  const uint8_t type = SecureTypeOf(first_, kept);
  if (frames == 1 && first_size_ <= kMaxHandshakeBytes &&
      (type == uint8_t(SecureType::kHello) || type == uint8_t(SecureType::kConfirm))) {
    return Handshake(type, first_, kept, why);
  }
  if (type == uint8_t(SecureType::kSealed)) {
    Reject("a sealed message on a connection without a session (answered: make the handshake)");
    return Send(ZmtpFrameOf(EncodeRefuse(RefuseReason::kNoSession)), why);
  }
  Reject("a message on a connection that has not made the secure handshake");
  return true;
}

bool Connection::TakeHandshakeToken() {
  const Clock::time_point now = Clock::now();
  tokens_ = std::min<double>(kHandshakeBurst, tokens_ + kHandshakesPerSecond *
                                                            std::chrono::duration<double>(now - last_refill_).count());
  last_refill_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

bool Connection::Handshake(uint8_t type, const void* data, size_t n, std::string* why) {
  if (!TakeHandshakeToken()) {
    owner_->Count(&ZmtpReceiver::Counters::rate_limited);
    Reject("a handshake over the rate of " + std::to_string(kHandshakesPerSecond) + " a second");
    return true;
  }
  const uint64_t window = CookieWindow(Clock::now());
  if (type == uint8_t(SecureType::kHello)) {
    std::string refused;
    const std::string answer = owner_->responder()->OnHello(id_, data, n, window, &refused);
    if (!refused.empty()) Reject(refused);
    return answer.empty() || Send(ZmtpFrameOf(answer), why);
  }
  std::shared_ptr<ServerSession> session;
  Status s = owner_->responder()->OnConfirm(id_, data, n, window, &session);
  if (!s.ok()) {
    Reject(s.message());
    return true;
  }
  const std::string nonce(reinterpret_cast<const char*>(session->client_nonce()), kNonceBytes);
  if (std::find(confirmed_.begin(), confirmed_.end(), nonce) != confirmed_.end()) {
    Reject("a CONFIRM from " + session->peer() + " repeated on its connection");
    return true;
  }
  confirmed_.push_back(nonce);
  if (confirmed_.size() > 8) confirmed_.pop_front();
  session_ = std::move(session);
  if (!proved_) {
    proved_ = true;
    owner_->Proved(this);
    owner_->Count(&ZmtpReceiver::Counters::proved);
  }
  return true;
}

void Connection::Reject(const std::string& why) const {
  owner_->CountRejected();
  LOG_EVERY_N(WARNING, 100) << "dropped a message from " << from_ << ": " << why << " (" << google::COUNTER
                            << " so far)";
}

}  // namespace tally
