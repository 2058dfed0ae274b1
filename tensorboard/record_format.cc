#include "tensorboard/record_format.h"

#include <array>
#include <cstring>

namespace tally {
namespace tensorboard {
namespace {

// One table of 256 entries, byte at a time: event files grow by a few hundred bytes per
// Speedometer window, far too little for a faster CRC to matter.
std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t ExtendCrc32c(uint32_t crc, const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = MakeTable();
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t Crc32c(const void* data, size_t n) { return ExtendCrc32c(0, data, n); }

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rotated = masked - kCrcMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

std::string FrameRecord(const std::string& data) {
  std::string out;
  out.reserve(kRecordHeaderBytes + data.size() + kRecordFooterBytes);
  PutLittleEndian(data.size(), 8, &out);
  PutLittleEndian(MaskCrc(Crc32c(out.data(), 8)), 4, &out);
  out += data;
  PutLittleEndian(MaskCrc(Crc32c(data.data(), data.size())), 4, &out);
  return out;
}

Status ParseRecord(const char* bytes, size_t n, RecordView* view, size_t* used) {
  if (n < kRecordHeaderBytes) {
    return Status::InvalidArgument("record header cut short: " + std::to_string(n) + " of " +
                                   std::to_string(kRecordHeaderBytes) + " bytes");
  }
  const uint64_t length = GetLittleEndian(bytes, 8);
  if (GetLittleEndian(bytes + 8, 4) != MaskCrc(Crc32c(bytes, 8))) {
    return Status::InvalidArgument("the CRC of the record's length (bytes 8..11) does not match");
  }
  if (length > n - kRecordHeaderBytes || n - kRecordHeaderBytes - length < kRecordFooterBytes) {
    return Status::InvalidArgument("record of " + std::to_string(length) + " data bytes cut short: " +
                                   std::to_string(n) + " bytes in all");
  }
  const char* data = bytes + kRecordHeaderBytes;
  if (GetLittleEndian(data + length, 4) != MaskCrc(Crc32c(data, length))) {
    return Status::InvalidArgument("the CRC of the record's " + std::to_string(length) +
                                   " data bytes (at byte " + std::to_string(kRecordHeaderBytes + length) +
                                   ") does not match");
  }
  view->data = data;
  view->length = length;
  *used = kRecordHeaderBytes + length + kRecordFooterBytes;
  return Status::Ok();
}

}  // namespace tensorboard
}  // namespace tally
