// CompressedReduce (compressed_reduce.h).
#include "kvstore/compressed_reduce.h"

#include "optim/reduce.h"

namespace tally {

Tensor CompressedReduce(const CompressionConfig& gc, const std::vector<Tensor>& vals, std::vector<Tensor>* residuals) {
  for (const Tensor& v : vals) {
    if (!AllFinite(v)) return Tensor();
  }
  const int64_t n = vals[0].numel();
  if (residuals->size() != vals.size()) residuals->assign(vals.size(), Tensor());
  Tensor sum = Tensor::Zeros({n}, DType::kF32), values = Tensor::Empty({n}, DType::kF32);
  Tensor packed = Tensor::Empty({PackedBytes(gc.type, n)}, DType::kU8);
  for (size_t d = 0; d < vals.size(); ++d) {
    Tensor& r = (*residuals)[d];
    if (!r.defined()) r = Tensor::Zeros({n}, DType::kF32);
    const Tensor g = QuantizerInput(gc, vals[d].Reshape({n}));
    Quantize(gc, g.data<float>(), r.data<float>(), n, packed.data<uint8_t>());
    Dequantize(gc, packed.data<uint8_t>(), n, values.data<float>());
    float* s = sum.data<float>();
    const float* v = values.data<float>();
    for (int64_t i = 0; i < n; ++i) s[i] += v[i];
  }
  if (gc.scale != 1.0f) {
    float* s = sum.data<float>();
    for (int64_t i = 0; i < n; ++i) s[i] /= gc.scale;
  }
  return sum;
}

}  // namespace tally
