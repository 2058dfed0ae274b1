#include "net/zmtp.h"

#include <algorithm>
#include <cstring>
#include <strings.h>

#include <glog/logging.h>

namespace tally {
namespace {

constexpr uint8_t kMore = 1, kLong = 2, kCommand = 4;
constexpr char kNull[] = "NULL";

void PutProperty(const std::string& name, const std::string& value, std::string* out) {
  out->push_back(static_cast<char>(name.size()));
  out->append(name);
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>(value.size() >> (8 * i)));
  out->append(value);
}

void PutHeader(uint8_t flags, size_t n, std::string* out) {
  if (n > 255) {
    out->push_back(static_cast<char>(flags | kLong));
    for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>(static_cast<uint64_t>(n) >> (8 * i)));
  } else {
    out->push_back(static_cast<char>(flags));
    out->push_back(static_cast<char>(n));
  }
}

}  // namespace

std::string ZmtpGreeting(const std::string& socket_type) {
  std::string g(kZmtpGreetingBytes, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = 3;  // version 3.0
  std::memcpy(&g[12], kNull, 4);
  std::string ready = "\x05READY";
  PutProperty("Socket-Type", socket_type, &ready);
  PutHeader(kCommand, ready.size(), &g);
  return g + ready;
}

void ZmtpPutFrame(const void* data, size_t n, bool more, std::string* out) {
  PutHeader(more ? kMore : 0, n, out);
  out->append(static_cast<const char*>(data), n);
}

bool ZmtpDecoder::CheckGreeting(std::string* why) const {
  const auto* b = reinterpret_cast<const uint8_t*>(buffer_.data());
  if (b[0] != 0xff || (b[9] & 1) == 0) {
    *why = "not a ZMTP 3 greeting";
    return false;
  }
  if (b[10] < 3) {
    *why = "ZMTP version " + std::to_string(b[10]) + " (3 or later spoken here)";
    return false;
  }
  char mechanism[21] = {};
  std::memcpy(mechanism, b + 12, 20);
  if (std::strcmp(mechanism, kNull) != 0 || std::any_of(b + 12 + 4, b + 32, [](uint8_t c) { return c != 0; })) {
    *why = "a ZMTP mechanism other than NULL";
    return false;
  }
  return true;
}

bool ZmtpDecoder::ParseReady(Sink* sink, std::string* why) {
  const auto* b = reinterpret_cast<const uint8_t*>(buffer_.data());
  const size_t n = buffer_.size();
  if (n < 6 || std::memcmp(b, "\x05READY", 6) != 0) {
    *why = "a ZMTP command other than READY before READY";
    return false;
  }
  std::string socket_type, identity;
  bool typed = false;
  for (size_t pos = 6; pos < n;) {
    const size_t name_len = b[pos++];
    if (name_len == 0 || n - pos < name_len + 4) {
      *why = "a malformed ZMTP READY property";
      return false;
    }
    const std::string name(reinterpret_cast<const char*>(b + pos), name_len);
    pos += name_len;
    const uint32_t value_len = uint32_t{b[pos]} << 24 | uint32_t{b[pos + 1]} << 16 | uint32_t{b[pos + 2]} << 8 | b[pos + 3];
    pos += 4;
    if (n - pos < value_len) {
      *why = "a malformed ZMTP READY property";
      return false;
    }
    const std::string value(reinterpret_cast<const char*>(b + pos), value_len);
    pos += value_len;
    if (strcasecmp(name.c_str(), "Socket-Type") == 0) {
      socket_type = value;
      typed = true;
    } else if (strcasecmp(name.c_str(), "Identity") == 0) {
      identity = value;
    }
  }
  if (!typed) {
    *why = "a ZMTP READY without a Socket-Type";
    return false;
  }
  ready_ = true;
  return sink->OnReady(socket_type, identity, why);
}

bool ZmtpDecoder::Header(Sink* sink, std::string* why) {
  if (flags_ & kCommand) {
    if (size_ == 0 || size_ > kMaxZmtpCommandBytes) {
      *why = "a ZMTP command of " + std::to_string(size_) + " bytes";
      return false;
    }
    buffer_.clear();
    state_ = State::kCommand;
    return true;
  }
  if (!ready_) {
    *why = "a message frame before the ZMTP handshake";
    return false;
  }
  uint8_t* dest = nullptr;
  uint64_t keep = 0;
  if (!sink->OnFrame(size_, (flags_ & kMore) != 0, &dest, &keep, why)) return false;
  keep_ = dest == nullptr ? 0 : std::min(keep, size_);
  dest_ = dest;
  kept_ = 0;
  skip_ = size_ - keep_;
  if (keep_ > 0) {
    state_ = State::kKeep;
  } else if (skip_ > 0) {
    state_ = State::kSkip;
  } else {
    return EndOfBody(sink, why);
  }
  return true;
}

bool ZmtpDecoder::EndOfBody(Sink* sink, std::string* why) {
  state_ = State::kFlags;
  return sink->OnFrameEnd(why);
}

bool ZmtpDecoder::Consume(const uint8_t* p, size_t n, Sink* sink, std::string* why) {
  while (n > 0) {
    size_t take = 0;
    switch (state_) {
      case State::kGreeting:
        take = std::min(n, kZmtpGreetingBytes - buffer_.size());
        buffer_.append(reinterpret_cast<const char*>(p), take);
        if (buffer_.size() == kZmtpGreetingBytes) {
          if (!CheckGreeting(why)) return false;
          state_ = State::kFlags;
        }
        break;
      case State::kFlags:
        take = 1;
        flags_ = *p;
        if ((flags_ & ~(kMore | kLong | kCommand)) != 0 || (flags_ & (kMore | kCommand)) == (kMore | kCommand)) {
          *why = "ZMTP frame flags " + std::to_string(flags_);
          return false;
        }
        buffer_.clear();
        state_ = State::kSize;
        break;
      case State::kSize: {
        const size_t need = (flags_ & kLong) ? 8 : 1;
        take = std::min(n, need - buffer_.size());
        buffer_.append(reinterpret_cast<const char*>(p), take);
        if (buffer_.size() < need) break;
        size_ = 0;
        for (char c : buffer_) size_ = size_ << 8 | static_cast<uint8_t>(c);
        if (size_ >> 63) {
          *why = "a ZMTP frame size with its top bit set";
          return false;
        }
        p += take;
        n -= take;
        if (!Header(sink, why)) return false;
        continue;
      }
      case State::kCommand:
        take = std::min<size_t>(n, size_ - buffer_.size());
        buffer_.append(reinterpret_cast<const char*>(p), take);
        if (buffer_.size() == size_) {
          state_ = State::kFlags;
          if (!(ready_ ? sink->OnCommand(why) : ParseReady(sink, why))) return false;
        }
        break;
      case State::kKeep:
        take = static_cast<size_t>(std::min<uint64_t>(n, keep_ - kept_));
        std::memcpy(dest_ + kept_, p, take);
        p += take;
        n -= take;
        if (!Filled(take, sink, why)) return false;
        continue;
      case State::kSkip:
        take = static_cast<size_t>(std::min<uint64_t>(n, skip_));
        skip_ -= take;
        if (skip_ == 0) {
          p += take;
          n -= take;
          if (!EndOfBody(sink, why)) return false;
          continue;
        }
        break;
    }
    p += take;
    n -= take;
  }
  return true;
}

size_t ZmtpDecoder::BodyLeft(uint8_t** dest) const {
  if (state_ != State::kKeep) return 0;
  *dest = dest_ + kept_;
  return static_cast<size_t>(keep_ - kept_);
}

bool ZmtpDecoder::Filled(size_t n, Sink* sink, std::string* why) {
  CHECK(state_ == State::kKeep && n <= keep_ - kept_);
  kept_ += n;
  if (kept_ < keep_) return true;
  if (skip_ > 0) {
    state_ = State::kSkip;
    return true;
  }
  return EndOfBody(sink, why);
}

}  // namespace tally
