// The fuzzers' view of their input: a cursor over the bytes libFuzzer hands a harness,
// reading the little-endian fields of each harness's layout (docs/fuzzing.md). Reads past
// the end give zeros or fewer bytes instead of failing, so that every input means
// something and the mutator never wastes an execution on a rejected layout.
//
// The matching writers, for the seed corpora, are the Put* functions below.
//
// Not thread-safe; a FuzzInput does not own the bytes it reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tally {
namespace fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t Le16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | Byte() << 8);
  }
  // The next n bytes, or all that is left when fewer remain.
  std::string_view Bytes(size_t n) {
    n = std::min(n, remaining());
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  std::string_view Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline void PutByte(uint8_t v, std::string* out) { out->push_back(static_cast<char>(v)); }
inline void PutLe16(uint16_t v, std::string* out) {
  PutByte(static_cast<uint8_t>(v), out);
  PutByte(static_cast<uint8_t>(v >> 8), out);
}

}  // namespace fuzz
}  // namespace tally
