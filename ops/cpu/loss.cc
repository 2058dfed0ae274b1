// Softmax cross-entropy and top-k accuracy over rows of logits, returned to the caller or
// added to accumulators (the *Accumulate ops). Each row's log-softmax is taken about its
// maximum so that exp never overflows; the loss is summed in double.
#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/backends.h"
#include "ops/kahan.h"
#include "ops/ops.h"
#include "ops/scalar_tensor.h"

namespace tally {
namespace {

void CheckLogits(const char* op, const Tensor& logits, const Tensor& labels) {
  CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2)
      << op << ": logits " << logits.ToString() << " must be float32 [N,K]";
  CHECK(labels.dtype() == DType::kI32 && labels.shape() == Shape({logits.dim(0)}))
      << op << ": labels " << labels.ToString() << " must be int32 [" << logits.dim(0) << "]";
}

int32_t LabelAt(const char* op, const Tensor& labels, int64_t row, int64_t classes) {
  const int32_t y = labels.data<int32_t>()[row];
  CHECK(y >= 0 && y < classes) << op << ": label " << y << " of row " << row
                               << " is outside [0, " << classes << ")";
  return y;
}

// The rows' summed loss; dlogits, when not null, receives (softmax - target) * grad_scale.
// The shared body of SoftmaxCrossEntropy and SoftmaxCrossEntropyAccumulate.
double CrossEntropyRows(const char* op, const Tensor& logits, const Tensor& labels,
                        float label_smoothing, float grad_scale, Tensor* dlogits) {
  CheckLogits(op, logits, labels);
  if (dlogits != nullptr) {
    CHECK(dlogits->dtype() == DType::kF32 && dlogits->shape() == logits.shape())
        << op << ": dlogits " << dlogits->ToString() << " must match logits "
        << logits.ToString();
  }
  const int64_t n = logits.dim(0), k = logits.dim(1);
  for (int64_t r = 0; r < n; ++r) LabelAt(op, labels, r, k);
  const float* lp = logits.data<float>();
  const int32_t* yp = labels.data<int32_t>();
  float* dp = dlogits != nullptr ? dlogits->data<float>() : nullptr;
  // MXNet's smooth_alpha: the label's target is 1 - s, every other class's s / (K - 1).
  const double off = k > 1 ? static_cast<double>(label_smoothing) / static_cast<double>(k - 1) : 0.0;
  const double on = 1.0 - label_smoothing;
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static) \
    num_threads(cpu::ThreadsFor(n * k))
  for (int64_t r = 0; r < n; ++r) {
    const float* x = lp + r * k;
    float mx = x[0];
    for (int64_t j = 1; j < k; ++j) mx = std::max(mx, x[j]);
    double sum_exp = 0.0, sum_x = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      sum_exp += std::exp(static_cast<double>(x[j] - mx));
      sum_x += x[j];
    }
    const double lse = mx + std::log(sum_exp);
    // -sum_j t_j * (x_j - lse) with t = off everywhere but (on) at the label; sum_j t_j = 1
    total += lse - (on - off) * x[yp[r]] - off * sum_x;
    if (dp != nullptr) {
      float* d = dp + r * k;
      for (int64_t j = 0; j < k; ++j) {
        const double target = j == yp[r] ? on : off;
        d[j] = static_cast<float>((std::exp(static_cast<double>(x[j]) - lse) - target) * grad_scale);
      }
    }
  }
  return total;
}

// How many rows have their label among the k largest logits: the shared body of
// TopKCorrect and TopKCorrectAccumulate.
int64_t CountTopK(const char* op, const Tensor& logits, const Tensor& labels, int k) {
  CheckLogits(op, logits, labels);
  CHECK_GT(k, 0) << op << ": k must be positive";
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t y = LabelAt(op, labels, r, classes);
    const float* x = logits.data<float>() + r * classes;
    // Classes that beat or tie the label rank ahead of it.
    int64_t ahead = 0;
    for (int64_t j = 0; j < classes; ++j) ahead += (j != y && x[j] >= x[y]) ? 1 : 0;
    correct += ahead < k ? 1 : 0;
  }
  return correct;
}

}  // namespace

double cpu::SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels, float label_smoothing,
                                float grad_scale, Tensor* dlogits) {
  return CrossEntropyRows("SoftmaxCrossEntropy", logits, labels, label_smoothing, grad_scale,
                          dlogits);
}

int64_t cpu::TopKCorrect(const Tensor& logits, const Tensor& labels, int k) {
  return CountTopK("TopKCorrect", logits, labels, k);
}

void cpu::SoftmaxCrossEntropyAccumulate(const Tensor& logits, const Tensor& labels,
                                        float label_smoothing, float grad_scale,
                                        const Tensor* scale, Tensor* dlogits, Tensor* loss_sum) {
  const char* op = "SoftmaxCrossEntropyAccumulate";
  CHECK(dlogits != nullptr) << op << ": dlogits is required";
  CHECK(loss_sum != nullptr) << op << ": loss_sum is required";
  CheckScalarTensor(op, "loss_sum", *loss_sum, DType::kF32, 2);
  float scaled = grad_scale;
  if (scale != nullptr) {
    CheckScalarTensor(op, "scale", *scale, DType::kF32, 1);
    scaled = grad_scale * scale->data<float>()[0];
  }
  const double batch = CrossEntropyRows(op, logits, labels, label_smoothing, scaled, dlogits);
  float* acc = loss_sum->data<float>();
  KahanAdd(batch, &acc[0], &acc[1]);
}

void cpu::TopKCorrectAccumulate(const Tensor& logits, const Tensor& labels, int k,
                                Tensor* count) {
  const char* op = "TopKCorrectAccumulate";
  CHECK(count != nullptr) << op << ": count is required";
  CheckScalarTensor(op, "count", *count, DType::kI32, 1);
  count->data<int32_t>()[0] += static_cast<int32_t>(CountTopK(op, logits, labels, k));
}

}  // namespace tally
