// The record framing of TensorBoard's event files (TFRecord), and its constants. Every
// record is (docs/tensorboard.md):
//
//   uint64 length (little-endian) | uint32 MaskCrc(Crc32c(those 8 bytes)) |
//   length bytes of data          | uint32 MaskCrc(Crc32c(data))
//
//   std::string framed = FrameRecord(event.SerializeAsString());
//   RecordView view;
//   size_t used;
//   Status s = ParseRecord(framed.data(), framed.size(), &view, &used);  // view.data: the event
//
// Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace tally {
namespace tensorboard {

// The bytes around a record's data: its length and the length's CRC before, the data's CRC after.
constexpr size_t kRecordHeaderBytes = 12;
constexpr size_t kRecordFooterBytes = 4;
// Added to the rotated CRC (MaskCrc): a CRC of data that holds CRCs itself is still spread.
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;
// The file_version of the first event of every file.
constexpr const char kFileVersion[] = "brain.Event:2";
// Event file names: this prefix, the creation time in seconds since 1970, '.', the host.
constexpr const char kFilePrefix[] = "events.out.tfevents.";

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF),
// of `n` bytes, or continuing `crc` over them (Extend(Extend(0, a), b) == Crc32c(a + b)).
uint32_t Crc32c(const void* data, size_t n);
uint32_t ExtendCrc32c(uint32_t crc, const void* data, size_t n);
// The masked CRC stored in a record: the CRC rotated right by 15 bits plus kCrcMaskDelta
// (mod 2^32). UnmaskCrc undoes it.
uint32_t MaskCrc(uint32_t crc);
uint32_t UnmaskCrc(uint32_t masked);

// One framed record holding `data`.
std::string FrameRecord(const std::string& data);

// Where a record's data lies in a buffer.
struct RecordView {
  const char* data = nullptr;
  uint64_t length = 0;
};
// Reads the record at the start of `bytes` (n of them): its data in *view and the bytes it
// took in *used. Fails naming the field (the length, its CRC, the data's CRC) when the
// record is cut short or a CRC does not match.
Status ParseRecord(const char* bytes, size_t n, RecordView* view, size_t* used);

}  // namespace tensorboard
}  // namespace tally
