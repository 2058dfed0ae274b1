// The input layouts of Tally's fuzzers, written from structured values: the seed corpora
// (make_seeds.cc) are made with these, and the message fuzzer uses MessageFrames to check
// that what the server sends decodes again. The readers are in each harness; every byte of
// each layout is in docs/fuzzing.md.
//
// Thread-safe: plain functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/transport.h"

namespace tally {
namespace fuzz {

// The frames msg travels in: the serialised Meta, then each data tensor's raw bytes.
std::vector<std::string> MessageFrames(const Message& msg);

// message_fuzzer: the job byte, then each message as its frame count (with the data frames'
// misalignment) and its length-prefixed frames.
struct JobShape {
  int num_servers = 1;       // 1 or 2
  int num_workers = 2;       // 1 to 4
  bool step_recorder = false;
};
std::string JobByte(const JobShape& shape);
// Appends one message of at most 7 frames, each under 64 KiB. REQUIRES: 0 <= misalign < 4.
void AppendMessage(const std::vector<std::string>& frames, int misalign, std::string* out);

// recordio_fuzzer: the flags byte, the .idx text (length-prefixed), then the .rec bytes.
constexpr uint8_t kRecordUseIndex = 1;    // open the .rec with the .idx
constexpr uint8_t kRecordScanAfterError = 2;  // ReadNext: after an error, find the next record
std::string RecordInput(uint8_t flags, std::string_view idx, std::string_view rec);

// ndarray_fuzzer and safetensors_fuzzer: the file's bytes as they are (no layout).

// checkpoint_fuzzer: the flags byte, the .params (length-prefixed), then the .states.
constexpr uint8_t kCheckpointStatesAsPrev = 1;  // the .states bytes are .states.prev; no .states
std::string CheckpointInput(uint8_t flags, std::string_view params, std::string_view states);

// image_fuzzer: the options byte, then the encoded image.
//   bits 0-2: min_width = min_height = 8 * (bits 0-2), 0 meaning no scaling
//   bit 3: power_of_two_scales_only
std::string ImageInput(uint8_t options, std::string_view image);

}  // namespace fuzz
}  // namespace tally
