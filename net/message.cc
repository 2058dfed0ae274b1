#include "net/transport.h"

#include <cstdint>
#include <cstring>

namespace tally {

DType FromWire(wire::DType t) {
  switch (t) {
    case wire::F16: return DType::kF16;
    case wire::BF16: return DType::kBF16;
    case wire::TWO_BIT:
    case wire::ONE_BIT: return DType::kU8;  // packed bits, bytes
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

bool IsPackedWireDType(wire::DType t) { return t == wire::TWO_BIT || t == wire::ONE_BIT; }

uint64_t WireFrameElements(wire::DType t, uint64_t length) {
  // Whole 4-byte words of 16 (2bit) or 32 (1bit) values, as MXNet packs them into floats.
  if (t == wire::TWO_BIT) return 4 * ((length + 15) / 16);
  if (t == wire::ONE_BIT) return 4 * ((length + 31) / 32);
  return length;
}

size_t DataBytes(const Message& msg) {
  size_t n = 0;
  for (const Tensor& t : msg.data) n += t.nbytes();
  return n;
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
  // A PULL names slices without sending data; every other data command (REPLICATE and
  // REPLICA_STATE too) sends one frame per slice.
  const bool carries_data = m.command() == wire::INIT || m.command() == wire::PUSH || m.command() == wire::PUSHPULL ||
                            m.command() == wire::REPLICATE || m.command() == wire::REPLICA_STATE ||
                            (m.command() == wire::RESPONSE && !msg.data.empty());
  const size_t frames = carries_data ? static_cast<size_t>(m.slices_size()) : 0;
  if (msg.data.size() != frames) {
    return Status::InvalidArgument(std::to_string(msg.data.size()) + " data frames for " +
                                   std::to_string(frames) + " expected");
  }
  const bool packed = IsPackedWireDType(m.dtype());
  if (packed && m.command() != wire::PUSH && m.command() != wire::PUSHPULL) {
    return Status::InvalidArgument("packed bits (dtype " + wire::DType_Name(m.dtype()) + ") in a " +
                                   wire::Command_Name(m.command()) + ": only pushes carry them");
  }
  if (IsPackedWireDType(m.pull_dtype())) return Status::InvalidArgument("pull_dtype is packed bits");
  const DType dtype = FromWire(m.dtype());
  for (size_t i = 0; i < frames; ++i) {
    const wire::KeySlice& s = m.slices(static_cast<int>(i));
    const Tensor& t = msg.data[i];
    if (s.length() > kMaxFrameBytes / DTypeSize(dtype) || t.dtype() != dtype ||
        static_cast<uint64_t>(t.numel()) != WireFrameElements(m.dtype(), s.length())) {
      return Status::InvalidArgument("data frame " + std::to_string(i) + " (" + t.ToString() +
                                     ") does not hold key " + std::to_string(s.key()) + "'s " +
                                     std::to_string(s.length()) + " " + DTypeName(dtype) + " values");
    }
  }
  return Status::Ok();
}

Status DecodeMessage(std::vector<WireFrame> frames, Message* msg) {
  // Frees whatever frames are still owned here when it goes out of scope.
  struct Release {
    std::vector<WireFrame>* frames;
    ~Release() {
      for (WireFrame& f : *frames) {
        if (f.release) f.release();
      }
    }
  } release{&frames};
  if (frames.empty()) return Status::InvalidArgument("no frames");
  const WireFrame& head = frames[0];
  if (head.size > kMaxMetaBytes) return Status::InvalidArgument("meta of " + std::to_string(head.size) + " bytes");
  Message out;
  if (!out.meta.ParseFromArray(head.data, static_cast<int>(head.size))) {
    return Status::InvalidArgument("meta does not parse");
  }
  const DType dtype = wire::DType_IsValid(out.meta.dtype()) ? FromWire(out.meta.dtype()) : DType::kF32;
  const size_t es = DTypeSize(dtype);
  for (size_t i = 1; i < frames.size(); ++i) {
    if (frames[i].size % es != 0) return Status::InvalidArgument("data frame of odd size");
  }
  for (size_t i = 1; i < frames.size(); ++i) {
    WireFrame& f = frames[i];
    const int64_t n = static_cast<int64_t>(f.size / es);
    if (reinterpret_cast<uintptr_t>(f.data) % es != 0) {
      // ZeroMQ leaves a small frame wherever it lay in its receive buffer, and the kernels
      // read whole elements: such a frame is copied (Release frees the original).
      Tensor aligned = Tensor::Empty({n}, dtype);
      if (f.size > 0) std::memcpy(aligned.raw_data(), f.data, f.size);
      out.data.push_back(std::move(aligned));
      continue;
    }
    std::function<void()> free_frame = std::move(f.release);
    f.release = nullptr;  // the tensor owns it now
    out.data.push_back(Tensor::FromBlob(const_cast<void*>(f.data), {n}, dtype, Device::Cpu(),
                                        [free_frame](void*) { if (free_frame) free_frame(); }));
  }
  TALLY_RETURN_IF_ERROR(ValidateMessage(out));  // out's tensors release their frames
  *msg = std::move(out);
  return Status::Ok();
}

std::string NodeName(wire::Role role, int rank) {
  switch (role) {
    case wire::SCHEDULER: return "scheduler";
    case wire::SERVER: return "server " + std::to_string(rank);
    case wire::WORKER: return "worker " + std::to_string(rank);
    default: return "";
  }
}

bool JobNames::Has(const std::string& name) const {
  for (int id = 0; id < size(); ++id) {
    if (Of(id) == name) return true;
  }
  return false;
}

std::string JobNames::Of(int id) const {
  const NodeIds ids = this->ids();
  if (id == kSchedulerId) return NodeName(wire::SCHEDULER, 0);
  if (ids.IsServer(id)) return NodeName(wire::SERVER, ids.ServerRank(id));
  if (ids.IsWorker(id)) return NodeName(wire::WORKER, ids.WorkerRank(id));
  return "";
}

}  // namespace tally
