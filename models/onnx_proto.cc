#include "models/onnx_proto.h"

#include <cstring>

namespace tally {

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void ProtoWriter::RawVarint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void ProtoWriter::Tag(int field, int wire_type) {
  RawVarint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void ProtoWriter::Varint(int field, int64_t v) {
  Tag(field, onnx::kWireVarint);
  RawVarint(static_cast<uint64_t>(v));
}

void ProtoWriter::Float(int field, float v) {
  Tag(field, onnx::kWireFixed32);
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void ProtoWriter::String(int field, std::string_view bytes) {
  LengthPrefix(field, bytes.size());
  out_.append(bytes.data(), bytes.size());
}

void ProtoWriter::LengthPrefix(int field, uint64_t length) {
  Tag(field, onnx::kWireLengthDelimited);
  RawVarint(length);
}

size_t ProtoWriter::LengthDelimitedSize(int field, uint64_t length) {
  return VarintSize(static_cast<uint64_t>(field) << 3) + VarintSize(length) + length;
}

}  // namespace tally
