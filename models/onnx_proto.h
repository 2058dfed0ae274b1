// The subset of ONNX's protobuf schema (onnx/onnx.proto) that `tally export --format onnx`
// writes, as field numbers, and a minimal protobuf wire-format encoder for it:
//
//   ProtoWriter dim;                                    // TensorShapeProto.Dimension
//   dim.String(onnx::kDimParam, "N");
//   ProtoWriter shape;
//   shape.Message(onnx::kShapeDim, dim);                // a length-delimited sub-message
//   std::string bytes = shape.bytes();
//
// The field numbers and their meaning are listed in docs/export.md ("ONNX"). The encoder
// writes proto2 repeated scalars unpacked (one tag per element), as the schema declares
// them; parsers accept that form for every repeated scalar. A ProtoWriter is a value type
// with no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tally {
namespace onnx {

// ModelProto
constexpr int kModelIrVersion = 1;      // int64
constexpr int kModelProducerName = 2;   // string
constexpr int kModelGraph = 7;          // GraphProto
constexpr int kModelOpsetImport = 8;    // repeated OperatorSetIdProto
constexpr int kModelMetadataProps = 14; // repeated StringStringEntryProto
// OperatorSetIdProto
constexpr int kOpsetDomain = 1;   // string; "" (or absent) is the default ai.onnx domain
constexpr int kOpsetVersion = 2;  // int64
// StringStringEntryProto
constexpr int kEntryKey = 1;
constexpr int kEntryValue = 2;
// GraphProto
constexpr int kGraphNode = 1;         // repeated NodeProto, in topological order
constexpr int kGraphName = 2;         // string
constexpr int kGraphInitializer = 5;  // repeated TensorProto
constexpr int kGraphInput = 11;       // repeated ValueInfoProto
constexpr int kGraphOutput = 12;      // repeated ValueInfoProto
// NodeProto
constexpr int kNodeInput = 1;      // repeated string
constexpr int kNodeOutput = 2;     // repeated string
constexpr int kNodeName = 3;       // string
constexpr int kNodeOpType = 4;     // string
constexpr int kNodeAttribute = 5;  // repeated AttributeProto
// AttributeProto
constexpr int kAttrName = 1;   // string
constexpr int kAttrF = 2;      // float (fixed32)
constexpr int kAttrI = 3;      // int64
constexpr int kAttrInts = 8;   // repeated int64
constexpr int kAttrType = 20;  // AttributeType enum, below
// AttributeProto.AttributeType
constexpr int kAttrTypeFloat = 1;
constexpr int kAttrTypeInt = 2;
constexpr int kAttrTypeInts = 7;
// TensorProto
constexpr int kTensorDims = 1;      // repeated int64
constexpr int kTensorDataType = 2;  // int32, a DataType below
constexpr int kTensorName = 8;      // string
constexpr int kTensorRawData = 9;   // bytes, little-endian, row-major
// TensorProto.DataType
constexpr int kFloat = 1;
constexpr int kFloat16 = 10;
// ValueInfoProto
constexpr int kValueName = 1;  // string
constexpr int kValueType = 2;  // TypeProto
// TypeProto
constexpr int kTypeTensor = 1;  // TypeProto.Tensor
// TypeProto.Tensor
constexpr int kTensorTypeElemType = 1;  // int32, a DataType
constexpr int kTensorTypeShape = 2;     // TensorShapeProto
// TensorShapeProto
constexpr int kShapeDim = 1;  // repeated Dimension
// TensorShapeProto.Dimension
constexpr int kDimValue = 1;  // int64
constexpr int kDimParam = 2;  // string, a symbolic dimension

// Protobuf wire types (the low 3 bits of a tag).
constexpr int kWireVarint = 0;
constexpr int kWireLengthDelimited = 2;
constexpr int kWireFixed32 = 5;

}  // namespace onnx

// The bytes a varint takes: 1 for values below 128, up to 10 for 64 bits.
size_t VarintSize(uint64_t v);

// Appends protobuf fields to a byte string.
class ProtoWriter {
 public:
  // int32, int64 and enum fields (wire type 0); negative values take 10 bytes, as protobuf
  // sign-extends them.
  void Varint(int field, int64_t v);
  void Float(int field, float v);                 // wire type 5, little-endian
  void String(int field, std::string_view bytes); // string, bytes (wire type 2)
  void Message(int field, const ProtoWriter& m) { String(field, m.bytes()); }
  // The tag and length of a length-delimited field whose `length` bytes follow separately,
  // so a large payload can go straight to a file without being copied into this buffer.
  void LengthPrefix(int field, uint64_t length);
  // The size of the field String(field, x) appends for an x of `length` bytes.
  static size_t LengthDelimitedSize(int field, uint64_t length);

  const std::string& bytes() const { return out_; }

 private:
  void Tag(int field, int wire_type);
  void RawVarint(uint64_t v);

  std::string out_;
};

}  // namespace tally
