// The dispatcher behind ops/ops.h (ops/dispatch.h): every op checks that its tensors share
// one device and calls that device's backend. No CUDA tensor can exist in a build without
// CUDA (ParseDevice and Storage::Allocate refuse them). The optimizer ops' dispatch is in
// ops/ops_optimizer.cc, so that code needing only them links without the layers' backends.
#include "ops/dispatch.h"
#include "ops/scalar_tensor.h"

namespace tally {

void Conv2dForward(const Tensor& x, const Tensor& w, const ConvParams& p, Tensor* y) {
  TALLY_OP("Conv2dForward", TENSORS(&x, &w, y), Conv2dForward(x, w, p, y));
}
void Conv2dBackwardData(const Tensor& dy, const Tensor& w, const ConvParams& p, Tensor* dx) {
  TALLY_OP("Conv2dBackwardData", TENSORS(&dy, &w, dx), Conv2dBackwardData(dy, w, p, dx));
}
void Conv2dBackwardFilter(const Tensor& x, const Tensor& dy, const ConvParams& p, Tensor* dw) {
  TALLY_OP("Conv2dBackwardFilter", TENSORS(&x, &dy, dw), Conv2dBackwardFilter(x, dy, p, dw));
}

void BatchNormForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const BatchNormParams& p, Tensor* running_mean, Tensor* running_var,
                              Tensor* y, Tensor* save_mean, Tensor* save_inv_std) {
  TALLY_OP("BatchNormForwardTraining",
           TENSORS(&x, &gamma, &beta, running_mean, running_var, y, save_mean, save_inv_std),
           BatchNormForwardTraining(x, gamma, beta, p, running_mean, running_var, y, save_mean,
                                    save_inv_std));
}
void BatchNormForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const BatchNormParams& p, Tensor* y) {
  TALLY_OP("BatchNormForwardInference", TENSORS(&x, &gamma, &beta, &running_mean, &running_var, y),
           BatchNormForwardInference(x, gamma, beta, running_mean, running_var, p, y));
}
void BatchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                       const Tensor& save_mean, const Tensor& save_inv_std, Tensor* dx,
                       Tensor* dgamma, Tensor* dbeta) {
  TALLY_OP("BatchNormBackward",
           TENSORS(&x, &dy, &gamma, &save_mean, &save_inv_std, dx, dgamma, dbeta),
           BatchNormBackward(x, dy, gamma, save_mean, save_inv_std, dx, dgamma, dbeta));
}
void BatchNormBackwardInference(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                const Tensor& running_mean, const Tensor& running_var,
                                const BatchNormParams& p, Tensor* dx, Tensor* dgamma,
                                Tensor* dbeta) {
  TALLY_OP("BatchNormBackwardInference",
           TENSORS(&x, &dy, &gamma, &running_mean, &running_var, dx, dgamma, dbeta),
           BatchNormBackwardInference(x, dy, gamma, running_mean, running_var, p, dx, dgamma,
                                      dbeta));
}
void BatchNormAddReluForwardTraining(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                     const Tensor& beta, const BatchNormParams& p, bool relu,
                                     Tensor* running_mean, Tensor* running_var, Tensor* y,
                                     Tensor* save_mean, Tensor* save_inv_std) {
  TALLY_OP("BatchNormAddReluForwardTraining",
           TENSORS(&x, z, &gamma, &beta, running_mean, running_var, y, save_mean, save_inv_std),
           BatchNormAddReluForwardTraining(x, z, gamma, beta, p, relu, running_mean, running_var,
                                           y, save_mean, save_inv_std));
}
void BatchNormAddReluForwardInference(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean,
                                      const Tensor& running_var, const BatchNormParams& p,
                                      bool relu, Tensor* y) {
  TALLY_OP("BatchNormAddReluForwardInference",
           TENSORS(&x, z, &gamma, &beta, &running_mean, &running_var, y),
           BatchNormAddReluForwardInference(x, z, gamma, beta, running_mean, running_var, p, relu,
                                            y));
}
void BatchNormAddReluBackward(const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& save_mean,
                              const Tensor& save_inv_std, bool relu, Tensor* dx, Tensor* dz,
                              Tensor* dgamma, Tensor* dbeta) {
  TALLY_OP("BatchNormAddReluBackward",
           TENSORS(&x, &y, &dy, &gamma, &save_mean, &save_inv_std, dx, dz, dgamma, dbeta),
           BatchNormAddReluBackward(x, y, dy, gamma, save_mean, save_inv_std, relu, dx, dz, dgamma,
                                    dbeta));
}

void ReluForward(const Tensor& x, Tensor* y) {
  TALLY_OP("ReluForward", TENSORS(&x, y), ReluForward(x, y));
}
void ReluBackward(const Tensor& y, const Tensor& dy, Tensor* dx) {
  TALLY_OP("ReluBackward", TENSORS(&y, &dy, dx), ReluBackward(y, dy, dx));
}
void Add(const Tensor& a, const Tensor& b, Tensor* y) {
  TALLY_OP("Add", TENSORS(&a, &b, y), Add(a, b, y));
}

void PadLastDim(const Tensor& x, Tensor* y) {
  TALLY_OP("PadLastDim", TENSORS(&x, y), PadLastDim(x, y));
}
void CropLastDim(const Tensor& x, Tensor* y) {
  TALLY_OP("CropLastDim", TENSORS(&x, y), CropLastDim(x, y));
}

void MaxPoolForward(const Tensor& x, const PoolParams& p, Tensor* y, Tensor* argmax) {
  TALLY_OP("MaxPoolForward", TENSORS(&x, y, argmax), MaxPoolForward(x, p, y, argmax));
}
void MaxPoolBackward(const Tensor& dy, const Tensor& argmax, Tensor* dx) {
  TALLY_OP("MaxPoolBackward", TENSORS(&dy, &argmax, dx), MaxPoolBackward(dy, argmax, dx));
}
void AvgPoolForward(const Tensor& x, const PoolParams& p, Tensor* y) {
  TALLY_OP("AvgPoolForward", TENSORS(&x, y), AvgPoolForward(x, p, y));
}
void AvgPoolBackward(const Tensor& dy, const PoolParams& p, Tensor* dx) {
  TALLY_OP("AvgPoolBackward", TENSORS(&dy, dx), AvgPoolBackward(dy, p, dx));
}
void GlobalAvgPoolForward(const Tensor& x, Tensor* y) {
  TALLY_OP("GlobalAvgPoolForward", TENSORS(&x, y), GlobalAvgPoolForward(x, y));
}
void GlobalAvgPoolBackward(const Tensor& dy, Tensor* dx) {
  TALLY_OP("GlobalAvgPoolBackward", TENSORS(&dy, dx), GlobalAvgPoolBackward(dy, dx));
}

void LinearForward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor* y) {
  TALLY_OP("LinearForward", TENSORS(&x, &w, b, y), LinearForward(x, w, b, y));
}
void LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                    Tensor* db) {
  TALLY_OP("LinearBackward", TENSORS(&x, &w, &dy, dx, dw, db), LinearBackward(x, w, dy, dx, dw, db));
}

double SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels, float label_smoothing,
                           float grad_scale, Tensor* dlogits) {
  TALLY_OP("SoftmaxCrossEntropy", TENSORS(&logits, &labels, dlogits),
           SoftmaxCrossEntropy(logits, labels, label_smoothing, grad_scale, dlogits));
}
int64_t TopKCorrect(const Tensor& logits, const Tensor& labels, int k) {
  TALLY_OP("TopKCorrect", TENSORS(&logits, &labels), TopKCorrect(logits, labels, k));
}
void SoftmaxCrossEntropyAccumulate(const Tensor& logits, const Tensor& labels,
                                   float label_smoothing, float grad_scale, const Tensor* scale,
                                   Tensor* dlogits, Tensor* loss_sum) {
  TALLY_OP("SoftmaxCrossEntropyAccumulate", TENSORS(&logits, &labels, scale, dlogits, loss_sum),
           SoftmaxCrossEntropyAccumulate(logits, labels, label_smoothing, grad_scale, scale,
                                         dlogits, loss_sum));
}
void TopKCorrectAccumulate(const Tensor& logits, const Tensor& labels, int k, Tensor* count) {
  TALLY_OP("TopKCorrectAccumulate", TENSORS(&logits, &labels, count),
           TopKCorrectAccumulate(logits, labels, k, count));
}
void LossScaleUpdate(const LossScaleParams& p, const Tensor& found, Tensor* scale,
                     Tensor* state) {
  // The checks of both backends, made once here.
  const char* op = "LossScaleUpdate";
  CHECK(scale != nullptr && state != nullptr) << op << ": scale and state are required";
  CheckScalarTensor(op, "found", found, DType::kI32, 1);
  CheckScalarTensor(op, "scale", *scale, DType::kF32, 1);
  CheckScalarTensor(op, "state", *state, DType::kI32, 2);
  TALLY_OP("LossScaleUpdate", TENSORS(&found, scale, state),
           LossScaleUpdate(p, found, scale, state));
}

}  // namespace tally
