// The operators of the ResNet family, forward and backward, on NHWC tensors, on the CPU
// (fp32, the reference) or on a CUDA device (fp32, fp16 or bf16).
//
//   ConvParams p{/*stride_h=*/2, /*stride_w=*/2, /*pad_h=*/1, /*pad_w=*/1};
//   Tensor y = Tensor::Empty(Conv2dOutputShape(x.shape(), w.shape(), p), DType::kF32);
//   Conv2dForward(x, w, p, &y);
//
// Conventions, for every op here:
// - Activations are NHWC [N, H, W, C]; convolution weights are [K, R, S, C]; fully connected
//   weights are [out, in] and compute y = x * w^T + b.
// - Outputs are preallocated by the caller with the right shape (the *OutputShape helpers
//   say which); shapes are CHECKed, since a wrong shape here is a bug in the caller. User
//   input is validated earlier, where a Status can name the flag.
// - Backward ops overwrite their gradient outputs (they do not accumulate).
// - Every tensor of one call lives on one device (CHECKed); the op runs there. CPU ops run on
//   the calling thread plus the OpenMP pool (SetNumThreads) and take fp32. CUDA ops are
//   queued on the device's stream (ops/device.h) and return before they finish; a copy to
//   the host waits for them. They take fp32, fp16 or bf16 activations, weights and
//   gradients (one dtype per call) and accumulate in fp32; batch-norm parameters and
//   statistics, optimizer state and master weights are always fp32, labels and argmax int32.
// Each op's CPU implementation is ops/cpu/<op>.cc; the CUDA one, ops/cuda/<op>.cu (or .cc for
// host-only library calls). Both implement the signatures of ops/op_signatures.inc.
#pragma once

#include <cstdint>
#include <vector>

#include "base/tensor.h"

namespace tally {

// Threads used by every op (OpenMP and oneDNN). 0 leaves the OpenMP default.
void SetNumThreads(int n);
int NumThreads();

// ---- convolution (ops/cpu/conv2d.cc; oneDNN) ----
struct ConvParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};
Shape Conv2dOutputShape(const Shape& x, const Shape& w, const ConvParams& p);
void Conv2dForward(const Tensor& x, const Tensor& w, const ConvParams& p, Tensor* y);
void Conv2dBackwardData(const Tensor& dy, const Tensor& w, const ConvParams& p, Tensor* dx);
void Conv2dBackwardFilter(const Tensor& x, const Tensor& dy, const ConvParams& p, Tensor* dw);

// ---- batch normalisation over N, H, W per channel C (ops/cpu/batch_norm.cc) ----
// Running statistics follow MXNet: running = momentum * running + (1 - momentum) * batch;
// the running variance takes the unbiased batch variance (as PyTorch), the normalisation
// the biased one.
struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.9f;
};
// x, y: [N, H, W, C] (or [N, C]); gamma, beta, running_*, save_*: [C].
// save_mean and save_inv_std keep what the backward pass needs.
void BatchNormForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const BatchNormParams& p, Tensor* running_mean, Tensor* running_var,
                              Tensor* y, Tensor* save_mean, Tensor* save_inv_std);
void BatchNormForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const BatchNormParams& p, Tensor* y);
void BatchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                       const Tensor& save_mean, const Tensor& save_inv_std, Tensor* dx,
                       Tensor* dgamma, Tensor* dbeta);
// The backward pass of BatchNormForwardInference, statistics held constant (MXNet's
// use_global_stats): dx = dy * gamma / sqrt(running_var + eps).
void BatchNormBackwardInference(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                const Tensor& running_mean, const Tensor& running_var,
                                const BatchNormParams& p, Tensor* dx, Tensor* dgamma,
                                Tensor* dbeta);

// Batch norm, residual add and ReLU in one: y = relu(BN(x) + z), the tail of every ResNet
// block. z (same shape as x) may be nullptr for no add; relu false leaves out the ReLU. On
// the GPU this is one pass over the data instead of three.
void BatchNormAddReluForwardTraining(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                     const Tensor& beta, const BatchNormParams& p, bool relu,
                                     Tensor* running_mean, Tensor* running_var, Tensor* y,
                                     Tensor* save_mean, Tensor* save_inv_std);
void BatchNormAddReluForwardInference(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean,
                                      const Tensor& running_var, const BatchNormParams& p,
                                      bool relu, Tensor* y);
// From the forward's output y: dy is masked by y > 0 (when relu) into dz, the gradient of
// z (when dz is not nullptr), and goes through the batch norm's backward into dx.
void BatchNormAddReluBackward(const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& save_mean,
                              const Tensor& save_inv_std, bool relu, Tensor* dx, Tensor* dz,
                              Tensor* dgamma, Tensor* dbeta);

// ---- elementwise (ops/cpu/elementwise.cc) ----
void ReluForward(const Tensor& x, Tensor* y);                       // y may be x
void ReluBackward(const Tensor& y, const Tensor& dy, Tensor* dx);   // from the output; dx may be dy
void Add(const Tensor& a, const Tensor& b, Tensor* y);              // y may be a or b

// ---- channel padding (ops/cpu/pad.cc) ----
// Tensor cores want the channels of a convolution's input in multiples of 4 or 8, and an
// image has 3: the stem pads its input and weight with zero channels.
// y = x with its last dimension extended by zeros. REQUIRES: same dtype (any), y's shape is
// x's but for a last dimension at least as large.
void PadLastDim(const Tensor& x, Tensor* y);
// y = the first y.dim(-1) entries of x's last dimension. REQUIRES: as PadLastDim, reversed.
void CropLastDim(const Tensor& x, Tensor* y);

// ---- pooling, NHWC (ops/cpu/pooling.cc) ----
struct PoolParams {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};
Shape PoolOutputShape(const Shape& x, const PoolParams& p);
// argmax: int32, the output's shape; the flat index h * W + w of each maximum in its image
// and channel plane. Padding never wins.
void MaxPoolForward(const Tensor& x, const PoolParams& p, Tensor* y, Tensor* argmax);
void MaxPoolBackward(const Tensor& dy, const Tensor& argmax, Tensor* dx);
// Average over the window's in-bounds elements (count_include_pad = false).
void AvgPoolForward(const Tensor& x, const PoolParams& p, Tensor* y);
void AvgPoolBackward(const Tensor& dy, const PoolParams& p, Tensor* dx);
// x: [N, H, W, C] -> y: [N, C]
void GlobalAvgPoolForward(const Tensor& x, Tensor* y);
void GlobalAvgPoolBackward(const Tensor& dy, Tensor* dx);

// ---- fully connected (ops/cpu/linear.cc) ----
// x: [N, in], w: [out, in], b: [out] or nullptr, y: [N, out].
void LinearForward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor* y);
// dx and db may be nullptr when not wanted.
void LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                    Tensor* db);

// ---- loss and metrics (ops/cpu/loss.cc) ----
// logits: [N, K] (fp32; on a GPU also fp16 or bf16, computed in fp32); labels: [N] int32 in
// [0, K); dlogits: logits' shape and dtype, never aliasing logits. With label smoothing s the
// target is MXNet's (SoftmaxOutput's smooth_alpha): 1 - s for the label and s / (K - 1) for
// every other class (K = 1: just the label). Returns the summed loss over the N rows (a double, so that
// per-device sums add up exactly enough). When dlogits is given it receives
// (softmax - target) * grad_scale; grad_scale = 1 / global batch makes the gradients of a
// mean loss, whichever device a row was computed on.
double SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels, float label_smoothing,
                           float grad_scale, Tensor* dlogits);
// How many rows have their label among the k largest logits (ties count against).
int64_t TopKCorrect(const Tensor& logits, const Tensor& labels, int k);

// ---- mixed precision (ops/cpu/finite.cc) ----
// Whether every element of every tensor is finite (no NaN, no ±inf): the check behind
// dynamic loss scaling. One kernel launch for all the tensors on the GPU, and a wait for its
// one-int answer. REQUIRES: float tensors (any float dtype) on one device.
bool AllFinite(const std::vector<Tensor>& tensors);

// ---- optimizers (ops/cpu/optimizer.cc), MXNet's update rules ----
// g = rescale_grad * grad, clipped to [-clip, clip] when clip_gradient > 0; then
//   sgd: mom = momentum * mom - lr * (g + wd * w);  w += mom        (w -= lr*(g+wd*w) if no momentum)
//   nag: g' = g + wd * w;  mom = momentum * mom + g';  w -= lr * (g' + momentum * mom)
struct SgdParams {
  float lr = 0.1f;
  float momentum = 0.0f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
  bool nesterov = false;
};
// weight, grad, mom: fp32 of equal size; mom may be nullptr when momentum is 0.
void SgdUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight, Tensor* mom);
// Multi-precision: weight and grad are fp16 or bf16; master (fp32) is updated as above and
// weight receives its rounded copy. mom is fp32.
void SgdMultiPrecisionUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight,
                             Tensor* master, Tensor* mom);

// Every parameter of a model updated by one call (one kernel launch on the GPU for up to a
// few hundred tensors, instead of one per tensor). Slot i is updated with lr * lr_mult and
// wd * wd_mult, as SgdUpdate (master undefined) or SgdMultiPrecisionUpdate (master defined);
// a slot without mom takes a step without momentum whatever p.momentum says.
// Tensors are views: the updates land in the slots' storage.
struct SgdSlot {
  Tensor grad;    // the weight's dtype
  Tensor weight;  // fp32; fp16 or bf16 when master is defined
  Tensor master;  // fp32 master weights, or undefined
  Tensor mom;     // fp32; undefined when momentum is 0
  float lr_mult = 1.0f;
  float wd_mult = 1.0f;
};
void MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots);

// ---- device-resident step results ----
// A training step on a GPU whose figures (loss, accuracy, the overflow check, the loss
// scale) stay on the device, so that the host never waits for the GPU inside a step and the
// step can be captured as a CUDA graph. Every per-step value these ops read (a loss scale, a
// learning rate, an overflow flag) is read from device memory by the kernels themselves,
// never by the host; the host reads the results back when it wants them (say, every 20
// steps for the Speedometer). Each op is queued on the device's stream and returns at once;
// on the CPU it runs at once. The scalar tensors live on the op's device (CHECKed with the
// other tensors) and their dtypes and shapes are CHECKed, naming the op and the argument.
// ops/cpu/ is the reference, as for every op.

// SoftmaxCrossEntropy, with its loss added to a running sum on the device:
// - dlogits (required) = (softmax - target) * (grad_scale * scale[0]), the product taken in
//   fp32; scale: fp32 [1], or nullptr for 1 (a loss scale kept on the device).
// - loss_sum: fp32 [2], a compensated (Kahan) sum: [0] the sum, [1] what the sum still
//   lacks, so that [0] + [1] is the total to about twice fp32's precision. The batch's
//   summed loss is computed exactly as SoftmaxCrossEntropy's (in double, in a fixed order),
//   then added by one thread (ops/kahan.h): the same batches give the same bits.
// A label outside [0, K) fails the CPU op; the CUDA op cannot fail without waiting, so it
// adds NaN to loss_sum and gives the row a NaN gradient instead: the step's finite check over
// the gradients then skips the step, and the NaN loss shows in the figures read back.
void SoftmaxCrossEntropyAccumulate(const Tensor& logits, const Tensor& labels,
                                   float label_smoothing, float grad_scale, const Tensor* scale,
                                   Tensor* dlogits, Tensor* loss_sum);
// Adds TopKCorrect(logits, labels, k) to count[0] (int32 [1]). On the GPU a row whose label
// is outside [0, K) counts as not correct (SoftmaxCrossEntropyAccumulate reports it).
void TopKCorrectAccumulate(const Tensor& logits, const Tensor& labels, int k, Tensor* count);

// found[0] (int32 [1]) = 0 when every element of every tensor is finite, else 1: AllFinite
// without the wait. The flag is written on every call (zeroed first, on the device).
// REQUIRES: float tensors (any float dtype), on found's device.
void NonFiniteFlag(const std::vector<Tensor>& tensors, Tensor* found);

// MultiSgdUpdate with a step's scalars read on the device. Each tensor is optional
// (undefined: p's value is used):
struct SgdStepScalars {
  Tensor lr;          // fp32 [1]: replaces p.lr (each slot still takes lr * lr_mult)
  Tensor grad_scale;  // fp32 [1]: gradients are multiplied by p.rescale_grad / grad_scale[0]
  Tensor found;       // int32 [1], NonFiniteFlag's: when nonzero the step is skipped, and no
                      // weight, master or momentum changes
};
void MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots,
                    const SgdStepScalars& s);

// Dynamic loss scaling, LossScaler's rule (worker/loss_scaler.h) on the device
// (ops/loss_scale_rule.h): a step with found[0] != 0 counts as skipped and, when enabled,
// halves the scale (not below min) and restarts the count of clean steps; when enabled,
// `window` clean steps in a row double the scale (not above max) and restart the count.
struct LossScaleParams {
  bool enabled = true;
  int window = 2000;
  float min = 1.0f;
  float max = 16777216.0f;  // 2^24
};
// scale: fp32 [1]; state: int32 [2] = {clean steps in a row, skipped steps so far};
// found: int32 [1], as NonFiniteFlag writes it.
void LossScaleUpdate(const LossScaleParams& p, const Tensor& found, Tensor* scale,
                     Tensor* state);

}  // namespace tally
