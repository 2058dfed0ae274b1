// Pushes of gradients quantised before they reach the dist store: what a GPU worker sends
// after quantising on its GPU (gpu_dist_kvstore.h), and the payload of one slice of a push
// that the dist store builds for every push (dist_kvstore.cc). Internal to kvstore/.
//
//   PackedPushes* pp = dynamic_cast<PackedPushes*>(dist_store.get());   // NewDistKVStore's
//   std::vector<Placement::Slice> slices;
//   TALLY_RETURN_IF_ERROR(pp->KeySlices(key, &slices));
//   std::vector<PackedSlice> layout = PackedLayout(gc.type, SliceSpans(slices));
//   ... quantise every slice into one buffer (QuantizeSlices here, QuantizeSlicesOnGpu) ...
//   TALLY_RETURN_IF_ERROR(pp->PushPullPacked(key, SplitPacked(layout, packed, nonfinite), raw, {out}, -key));
//
// The bits must be those the store's own PushPull would have made (the compression given to
// SetGradientCompression, the gradient divided by the loss scale of SetGradientScale and
// multiplied by the compression's scale, the residual carried from push to push): the
// servers cannot tell the two apart, and the tests hold them to the same bits.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compress/compress.h"
#include "kvstore/placement.h"
#include "net/transport.h"

namespace tally {

class PackedPushes {
 public:
  virtual ~PackedPushes() = default;
  // The key's server slices, in the order PushPullPacked takes their bits; fixed by Init.
  virtual Status KeySlices(int key, std::vector<Placement::Slice>* out) const = 0;
  // PushPull (kvstore.h) of one device's gradient already quantised: packed[s] holds slice
  // s's bits (PackedBytes of its length, host memory) or is undefined where the slice was
  // not finite, and then raw's values of the slice go uncompressed, as PushPull sends them
  // (raw: host, the key's size and a wire dtype; read only for those slices). The store's
  // residual for the key is not used. REQUIRES: gradient compression is on.
  virtual Status PushPullPacked(int key, const std::vector<Tensor>& packed, const Tensor& raw,
                                const std::vector<Tensor>& outs, int priority) = 0;
};

// (offset, length) of each slice, for PackedLayout.
std::vector<std::pair<int64_t, int64_t>> SliceSpans(const std::vector<Placement::Slice>& slices);

// The per-slice tensors PushPullPacked takes from one buffer laid out by `layout` (host u8):
// views of packed, undefined where nonfinite[s] (host i32, one per slice) is nonzero.
std::vector<Tensor> SplitPacked(const std::vector<PackedSlice>& layout, const Tensor& packed,
                                const Tensor& nonfinite);

// On the CPU, what QuantizeSlicesOnGpu (compress/cuda/quantize.h) does on a GPU, slice by
// slice as the dist store's pushes: nonfinite[s] = 1 and nothing else for a slice with an
// inf or NaN, else 0 and QuantizerInput(gc, slice, loss_scale) quantised with residual into
// packed at the slice's byte_offset. grad: 1-D host f32/f16/bf16; residual f32, packed u8
// and nonfinite i32 of the layout's sizes.
void QuantizeSlices(const CompressionConfig& gc, const Tensor& grad, float loss_scale,
                    const std::vector<PackedSlice>& layout, Tensor* residual, Tensor* packed, Tensor* nonfinite);

// PushPullPacked's packed slices by their slices' offsets, after checking that there is one
// per slice, each of its packed size or undefined, and that compression is on.
Status PackedByOffset(const CompressionConfig& gc, int key, const std::vector<Placement::Slice>& slices,
                      const std::vector<Tensor>& packed, std::map<int64_t, Tensor>* out);

// Fills m's dtype, gc_threshold, grad_scale and data for one slice of a push, `part` being
// the slice of the device sum. With compression on and the slice finite (or prepacked
// given and defined), the packed bits: prepacked's, else part quantised with the key's
// residual (*residual, made on first use: fp32 zeros of key_numel) at sl.offset. Otherwise
// part itself, unscaled, with grad_scale = loss_scale.
void SetSlicePayload(const CompressionConfig& gc, float loss_scale, const Placement::Slice& sl, const Tensor& part,
                     const Tensor* prepacked, int64_t key_numel, Tensor* residual, Message* m);

}  // namespace tally
