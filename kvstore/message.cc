#include "kvstore/transport.h"

namespace tally {

DType FromWire(wire::DType t) {
  switch (t) {
    case wire::F16: return DType::kF16;
    case wire::BF16: return DType::kBF16;
    default: return DType::kF32;
  }
}

wire::DType ToWire(DType t) {
  switch (t) {
    case DType::kF32: return wire::F32;
    case DType::kF16: return wire::F16;
    case DType::kBF16: return wire::BF16;
    default: LOG(FATAL) << "no wire dtype for " << DTypeName(t);
  }
  return wire::F32;
}

Status ValidateMessage(const Message& msg) {
  const wire::Meta& m = msg.meta;
  if (!wire::Command_IsValid(m.command()) || m.command() == wire::COMMAND_UNKNOWN) {
    return Status::InvalidArgument("unknown command " + std::to_string(m.command()));
  }
  if (!wire::DType_IsValid(m.dtype()) || !wire::DType_IsValid(m.pull_dtype())) {
    return Status::InvalidArgument("unknown dtype");
  }
  if (m.slices_size() > kMaxSlicesPerMessage) {
    return Status::InvalidArgument(std::to_string(m.slices_size()) + " slices in one message");
  }
  // A PULL names slices without sending data; every other data command sends one frame per slice.
  const bool carries_data = m.command() == wire::INIT || m.command() == wire::PUSH || m.command() == wire::PUSHPULL ||
                            (m.command() == wire::RESPONSE && !msg.data.empty());
  const size_t frames = carries_data ? static_cast<size_t>(m.slices_size()) : 0;
  if (msg.data.size() != frames) {
    return Status::InvalidArgument(std::to_string(msg.data.size()) + " data frames for " +
                                   std::to_string(frames) + " expected");
  }
  const DType dtype = FromWire(m.dtype());
  for (size_t i = 0; i < frames; ++i) {
    const wire::KeySlice& s = m.slices(static_cast<int>(i));
    const Tensor& t = msg.data[i];
    if (s.length() > kMaxFrameBytes / DTypeSize(dtype) || t.dtype() != dtype ||
        static_cast<uint64_t>(t.numel()) != s.length()) {
      return Status::InvalidArgument("data frame " + std::to_string(i) + " (" + t.ToString() +
                                     ") does not hold key " + std::to_string(s.key()) + "'s " +
                                     std::to_string(s.length()) + " " + DTypeName(dtype) + " values");
    }
  }
  return Status::Ok();
}

}  // namespace tally
