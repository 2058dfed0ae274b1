// Pushes of gradients quantised before the dist store (packed_push.h).
#include "kvstore/packed_push.h"

#include <glog/logging.h>

#include <string>

#include "optim/reduce.h"

namespace tally {

std::vector<std::pair<int64_t, int64_t>> SliceSpans(const std::vector<Placement::Slice>& slices) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const Placement::Slice& sl : slices) spans.emplace_back(sl.offset, sl.length);
  return spans;
}

std::vector<Tensor> SplitPacked(const std::vector<PackedSlice>& layout, const Tensor& packed,
                                const Tensor& nonfinite) {
  CHECK(static_cast<int64_t>(layout.size()) == nonfinite.numel() && nonfinite.dtype() == DType::kI32);
  std::vector<Tensor> out(layout.size());
  for (size_t s = 0; s < layout.size(); ++s) {
    if (nonfinite.data<int32_t>()[s] != 0) continue;
    out[s] = packed.Slice(layout[s].byte_offset, layout[s].byte_offset + layout[s].bytes);
  }
  return out;
}

Status PackedByOffset(const CompressionConfig& gc, int key, const std::vector<Placement::Slice>& slices,
                      const std::vector<Tensor>& packed, std::map<int64_t, Tensor>* out) {
  const std::string what = "packed push of key " + std::to_string(key);
  if (!gc.enabled() || packed.size() != slices.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(packed.size()) + " slices' bits for " +
                                   std::to_string(slices.size()) + " slices, compression " + CompressionName(gc.type));
  }
  for (size_t s = 0; s < slices.size(); ++s) {
    const Tensor& p = packed[s];
    if (p.defined() && (p.dtype() != DType::kU8 || !p.device().is_cpu() ||
                        p.numel() != PackedBytes(gc.type, slices[s].length))) {
      return Status::InvalidArgument(what + ": slice " + std::to_string(s) + " has " + p.ToString() + ", not its " +
                                     std::to_string(PackedBytes(gc.type, slices[s].length)) + " packed bytes");
    }
    (*out)[slices[s].offset] = p;
  }
  return Status::Ok();
}

void QuantizeSlices(const CompressionConfig& gc, const Tensor& grad, float loss_scale,
                    const std::vector<PackedSlice>& layout, Tensor* residual, Tensor* packed, Tensor* nonfinite) {
  CHECK(nonfinite->numel() == static_cast<int64_t>(layout.size()) && residual->numel() == grad.numel());
  for (size_t s = 0; s < layout.size(); ++s) {
    const PackedSlice& p = layout[s];
    const Tensor part = grad.Slice(p.offset, p.offset + p.length);
    const bool finite = AllFinite(part);
    nonfinite->data<int32_t>()[s] = finite ? 0 : 1;
    if (!finite) continue;
    const Tensor in = QuantizerInput(gc, part, loss_scale);
    Quantize(gc, in.data<float>(), residual->data<float>() + p.offset, p.length,
             packed->data<uint8_t>() + p.byte_offset);
  }
}

void SetSlicePayload(const CompressionConfig& gc, float loss_scale, const Placement::Slice& sl, const Tensor& part,
                     const Tensor* prepacked, int64_t key_numel, Tensor* residual, Message* m) {
  // A gradient that is not finite goes as it is, residual untouched: the server sees it and
  // skips the step, as without compression.
  const bool compressed = gc.enabled() && (prepacked != nullptr ? prepacked->defined() : AllFinite(part));
  if (!compressed) {
    if (loss_scale != 1.0f) m->meta.set_grad_scale(loss_scale);
    m->meta.set_dtype(ToWire(part.dtype()));
    m->data.push_back(part);
    return;
  }
  m->meta.set_dtype(gc.type == CompressionType::kTwoBit ? wire::TWO_BIT : wire::ONE_BIT);
  if (gc.type == CompressionType::kTwoBit) m->meta.set_gc_threshold(gc.threshold);
  if (gc.scale != 1.0f) m->meta.set_grad_scale(gc.scale);
  if (prepacked != nullptr) {
    m->data.push_back(*prepacked);
    return;
  }
  // The threshold is in the compression's units: the gradient divided by the loss scale and
  // multiplied by the compression's scale first; the residual keeps what the bits do not.
  const Tensor in = QuantizerInput(gc, part, loss_scale);
  if (!residual->defined()) *residual = Tensor::Zeros({key_numel}, DType::kF32);
  Tensor packed = Tensor::Empty({PackedBytes(gc.type, sl.length)}, DType::kU8);
  Quantize(gc, in.data<float>(), residual->data<float>() + sl.offset, sl.length, packed.data<uint8_t>());
  m->data.push_back(packed);
}

}  // namespace tally
