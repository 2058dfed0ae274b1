// The constants of MXNet's RecordIO format (dmlc-core's recordio plus MXNet's image record
// header), in one place. docs/recordio.md lays out every byte; change both together.
//
// Nothing here allocates or holds state; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tally {
namespace recordio {

// Every part of a record starts with this word, little-endian on disk (bytes 0a 23 d7 ce).
constexpr uint32_t kMagic = 0xCED7230Au;

// The second word of a part: cflag in the top 3 bits, the part's payload length below.
constexpr int kCflagShift = 29;
constexpr uint32_t kLengthMask = (1u << kCflagShift) - 1;
constexpr size_t kPartHeaderBytes = 8;  // magic + lrec
constexpr size_t kAlign = 4;            // each part is padded with zeros to this

// Continuation flags: which piece of a record a part holds.
constexpr uint32_t kCflagWhole = 0;
constexpr uint32_t kCflagFirst = 1;
constexpr uint32_t kCflagMiddle = 2;
constexpr uint32_t kCflagLast = 3;

// The most bytes a reader accepts for one record (all parts together). A declared length
// past this is treated as corruption, not allocated. dmlc-core's writer refuses records of
// 2^29 bytes or more, so no valid file comes near it.
constexpr uint64_t kMaxRecordBytes = 1ull << 30;

inline uint32_t EncodeLrec(uint32_t cflag, uint32_t length) { return (cflag << kCflagShift) | length; }
inline uint32_t LrecCflag(uint32_t lrec) { return lrec >> kCflagShift; }
inline uint32_t LrecLength(uint32_t lrec) { return lrec & kLengthMask; }
inline size_t PaddedLength(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// MXNet's image record header (IRHeader), at the start of an image record's payload:
//   u32 flag | f32 label | u64 id | u64 id2, then `flag` f32 labels when flag > 0.
constexpr size_t kImageHeaderBytes = 24;
// The most labels a reader accepts in one header (flag); more is treated as corruption.
constexpr uint32_t kMaxLabels = 1u << 20;

}  // namespace recordio
}  // namespace tally
