// Softmax cross-entropy and top-k accuracy on the GPU: one block per row of logits (K = 1000
// for ImageNet is four elements per thread), the row's arithmetic in fp32 by the formulas of
// ops/cuda/loss_math.cuh, each row's result in a device buffer, then one single-block kernel
// that adds the rows up in double and finds the first row whose label is out of range. The
// four ops share these kernels and differ only in where the total goes (RowsSink):
// SoftmaxCrossEntropy and TopKCorrect copy it back to the host; the *Accumulate ops add it,
// on the device, to a Kahan sum (ops/kahan.h) or a count, and wait for nothing.
//
// Determinism: every reduction here has a fixed shape (a thread's strided elements in order,
// then warp shuffles, then one warp over the warps), with no atomics, so a batch gives the
// same loss to the last bit on every run. Returning the loss as a double means waiting for
// the stream: the op copies back one small struct (the sum and the first bad row) and
// synchronises, so CHECK can name a bad label before anyone uses the loss. The *Accumulate
// ops cannot fail without that wait: a bad label makes the loss sum NaN instead.
#include <cstdint>

#include "ops/backends.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/loss_math.cuh"
#include "ops/kahan.h"
#include "ops/ops.h"
#include "ops/scalar_tensor.h"

namespace tally {
namespace cuda {
namespace {

constexpr int kThreads = 256;  // per block, for the row kernels and the final sum
constexpr int kWarps = kThreads / 32;

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MinOp {
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};

// The reduction of v over the block, returned to every thread. shared: kWarps slots of the
// caller's, reusable by the next call (the leading barrier waits for its readers).
// REQUIRES: blockDim.x == kThreads, and every thread of the block calls it.
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = shared[lane < kWarps ? lane : 0];
    for (int offset = kWarps / 2; offset > 0; offset /= 2) {
      v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

// Writes the row's loss to row_loss[row] and, when dlogits is not null, its gradient times
// grad_scale (times *scale when scale is not null: a loss scale kept on the device). A row
// whose label is out of range gets loss 0 and a gradient without the one-hot part; the host
// fails the op once SumRowsKernel has found it (or the loss sum turns NaN).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyRowsKernel(const T* logits, const int32_t* labels, int64_t classes,
                           float smoothing, float grad_scale, const float* scale, T* dlogits,
                           double* row_loss) {
  __shared__ float shared[kWarps];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  float max = -INFINITY;
  for (int64_t j = threadIdx.x; j < classes; j += kThreads) max = fmaxf(max, Load(x[j]));
  max = BlockReduce(max, MaxOp(), shared);
  float sum_exp = 0.0f, sum_x = 0.0f;
  for (int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const float v = Load(x[j]);
    sum_exp += expf(v - max);
    sum_x += v;
  }
  sum_exp = BlockReduce(sum_exp, SumOp(), shared);
  sum_x = BlockReduce(sum_x, SumOp(), shared);
  const int32_t label = labels[row];
  const bool valid = LabelInRange(label, classes);
  if (threadIdx.x == 0) {
    row_loss[row] = valid ? SmoothedCrossEntropy(LogSumExp(max, sum_exp), Load(x[label]), sum_x,
                                                 smoothing, classes)
                          : 0.0;
  }
  if (dlogits == nullptr) return;
  T* d = dlogits + row * classes;
  const float log_sum_exp = logf(sum_exp);
  const float g = scale != nullptr ? grad_scale * *scale : grad_scale;
  for (int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const float target = SmoothedTarget(j == label, smoothing, classes);
    // A bad label's row gets a NaN gradient, so that the step's finite check skips the step
    // (and counts it) rather than training on a gradient without its one-hot term.
    Store(&d[j], valid ? CrossEntropyGradient(Load(x[j]) - max, log_sum_exp, target, g) : NAN);
  }
}

// row_correct[row] = 1 when fewer than k classes rank ahead of the row's label, else 0 (a
// double, so that SumRowsKernel serves both ops; sums of 0 and 1 are exact in double).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    TopKRowsKernel(const T* logits, const int32_t* labels, int64_t classes, int k,
                   double* row_correct) {
  __shared__ long long shared[kWarps];
  const int64_t row = blockIdx.x;
  const int32_t label = labels[row];
  if (!LabelInRange(label, classes)) {  // the same label for the whole block: all return
    if (threadIdx.x == 0) row_correct[row] = 0.0;
    return;
  }
  const T* x = logits + row * classes;
  const float x_label = Load(x[label]);
  long long ahead = 0;
  for (int64_t j = threadIdx.x; j < classes; j += kThreads) {
    ahead += RanksAhead(j, label, Load(x[j]), x_label) ? 1 : 0;
  }
  ahead = BlockReduce(ahead, SumOp(), shared);
  if (threadIdx.x == 0) row_correct[row] = ahead < k ? 1.0 : 0.0;
}

// What the host reads back: the rows' sum, and the first row with a bad label (-1: none).
struct RowsTotal {
  double sum;
  long long bad_row;
  int32_t bad_label;
};

// Where SumRowsKernel puts the rows' total; exactly one of the three is not null.
struct RowsSink {
  RowsTotal* total;  // for the host to read back
  float* loss_sum;   // fp32 [2], a Kahan sum: the total is added (NaN after a bad label)
  int32_t* count;    // int32 [1]: the total, a count of rows, is added
};

// One block: thread t adds rows t, t + kThreads, ... in order, then the fixed tree; thread 0
// delivers the total to the sink.
__global__ void __launch_bounds__(kThreads)
    SumRowsKernel(const double* rows, const int32_t* labels, int64_t n, int64_t classes,
                  RowsSink sink) {
  __shared__ double sums[kWarps];
  __shared__ long long firsts[kWarps];
  double sum = 0.0;
  long long first_bad = n;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    sum += rows[i];
    if (first_bad == n && !LabelInRange(labels[i], classes)) first_bad = i;
  }
  sum = BlockReduce(sum, SumOp(), sums);
  first_bad = BlockReduce(first_bad, MinOp(), firsts);
  if (threadIdx.x != 0) return;
  if (sink.total != nullptr) {
    sink.total->sum = sum;
    sink.total->bad_row = first_bad < n ? first_bad : -1;
    sink.total->bad_label = first_bad < n ? labels[first_bad] : 0;
  }
  if (sink.loss_sum != nullptr) {
    KahanAdd(first_bad < n ? static_cast<double>(NAN) : sum, &sink.loss_sum[0],
             &sink.loss_sum[1]);
  }
  if (sink.count != nullptr) *sink.count += static_cast<int32_t>(sum);
}

void CheckLogits(const char* op, const Tensor& logits, const Tensor& labels) {
  const DType t = logits.dtype();
  CHECK((t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) && logits.ndim() == 2)
      << op << ": logits " << logits.ToString() << " must be float32, float16 or bfloat16 [N,K]";
  CHECK_GT(logits.dim(1), 0) << op << ": logits " << logits.ToString() << " have no classes";
  CHECK(logits.dim(0) < (int64_t{1} << 31))
      << op << ": logits " << logits.ToString() << " have more rows than a grid has blocks";
  CHECK(labels.dtype() == DType::kI32 && labels.shape() == Shape({logits.dim(0)}))
      << op << ": labels " << labels.ToString() << " must be int32 [" << logits.dim(0) << "]";
}

// Scratch for n rows' values and the total: the total first, the rows 256 bytes on. Freed
// when it goes out of scope, which is safe: later work on the stream runs after the kernels.
constexpr size_t kRowsOffset = 256;
static_assert(sizeof(RowsTotal) <= kRowsOffset, "RowsTotal must fit before the rows");

struct RowsScratch {
  Tensor memory;
  RowsTotal* total;
  double* rows;
};

RowsScratch NewRowsScratch(const Device& device, int64_t n) {
  RowsScratch s;
  s.memory = Workspace(device, kRowsOffset + n * sizeof(double));
  s.total = reinterpret_cast<RowsTotal*>(s.memory.raw_data());
  s.rows = reinterpret_cast<double*>(static_cast<char*>(s.memory.raw_data()) + kRowsOffset);
  return s;
}

// Queues each row's loss (and gradient, when dlogits is not null) into scratch.rows.
void QueueCrossEntropyRows(const char* op, const DeviceContext& ctx, const Tensor& logits,
                           const Tensor& labels, float label_smoothing, float grad_scale,
                           const float* scale, Tensor* dlogits, const RowsScratch& scratch) {
  TALLY_DISPATCH_FLOAT(logits.dtype(), op, T, {
    CrossEntropyRowsKernel<T><<<static_cast<unsigned>(logits.dim(0)), kThreads, 0, ctx.stream>>>(
        Ptr<T>(logits), Ptr<int32_t>(labels), logits.dim(1), label_smoothing, grad_scale, scale,
        dlogits != nullptr ? Ptr<T>(*dlogits) : nullptr, scratch.rows);
    TALLY_LAUNCH_CHECK();
  });
}

// Queues whether each row is correct at k into scratch.rows.
void QueueTopKRows(const char* op, const DeviceContext& ctx, const Tensor& logits,
                   const Tensor& labels, int k, const RowsScratch& scratch) {
  TALLY_DISPATCH_FLOAT(logits.dtype(), op, T, {
    TopKRowsKernel<T><<<static_cast<unsigned>(logits.dim(0)), kThreads, 0, ctx.stream>>>(
        Ptr<T>(logits), Ptr<int32_t>(labels), logits.dim(1), k, scratch.rows);
    TALLY_LAUNCH_CHECK();
  });
}

// Queues the sum of the rows' values (after the row kernel that wrote them) into sink.
void QueueSumRows(const DeviceContext& ctx, const RowsScratch& scratch, const Tensor& labels,
                  int64_t classes, const RowsSink& sink) {
  SumRowsKernel<<<1, kThreads, 0, ctx.stream>>>(scratch.rows, Ptr<int32_t>(labels),
                                                labels.numel(), classes, sink);
  TALLY_LAUNCH_CHECK();
}

// Adds up the rows' values, waits for the stream and fails the op, naming the row, if a
// label was out of range.
double SumRows(const char* op, const DeviceContext& ctx, const RowsScratch& scratch,
               const Tensor& labels, int64_t classes) {
  QueueSumRows(ctx, scratch, labels, classes, RowsSink{scratch.total, nullptr, nullptr});
  RowsTotal host{};
  TALLY_CUDA_CHECK(
      cudaMemcpyAsync(&host, scratch.total, sizeof(host), cudaMemcpyDeviceToHost, ctx.stream));
  TALLY_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  CHECK(host.bad_row < 0) << op << ": label " << host.bad_label << " of row " << host.bad_row
                          << " is outside [0, " << classes << ")";
  return host.sum;
}

void CheckDlogits(const char* op, const Tensor& logits, const Tensor& dlogits) {
  CHECK(dlogits.dtype() == logits.dtype() && dlogits.shape() == logits.shape())
      << op << ": dlogits " << dlogits.ToString() << " must match logits " << logits.ToString();
}

}  // namespace

double SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels, float label_smoothing,
                           float grad_scale, Tensor* dlogits) {
  const char* op = "SoftmaxCrossEntropy";
  CheckLogits(op, logits, labels);
  if (dlogits != nullptr) CheckDlogits(op, logits, *dlogits);
  const int64_t n = logits.dim(0);
  if (n == 0) return 0.0;
  const DeviceContext& ctx = Context(logits.device());
  const RowsScratch scratch = NewRowsScratch(logits.device(), n);
  QueueCrossEntropyRows(op, ctx, logits, labels, label_smoothing, grad_scale, nullptr, dlogits,
                        scratch);
  return SumRows(op, ctx, scratch, labels, logits.dim(1));
}

int64_t TopKCorrect(const Tensor& logits, const Tensor& labels, int k) {
  const char* op = "TopKCorrect";
  CheckLogits(op, logits, labels);
  CHECK_GT(k, 0) << op << ": k must be positive";
  const int64_t n = logits.dim(0);
  if (n == 0) return 0;
  const DeviceContext& ctx = Context(logits.device());
  const RowsScratch scratch = NewRowsScratch(logits.device(), n);
  QueueTopKRows(op, ctx, logits, labels, k, scratch);
  return static_cast<int64_t>(SumRows(op, ctx, scratch, labels, logits.dim(1)));
}

void SoftmaxCrossEntropyAccumulate(const Tensor& logits, const Tensor& labels,
                                   float label_smoothing, float grad_scale, const Tensor* scale,
                                   Tensor* dlogits, Tensor* loss_sum) {
  const char* op = "SoftmaxCrossEntropyAccumulate";
  CheckLogits(op, logits, labels);
  CHECK(dlogits != nullptr) << op << ": dlogits is required";
  CheckDlogits(op, logits, *dlogits);
  CHECK(loss_sum != nullptr) << op << ": loss_sum is required";
  CheckScalarTensor(op, "loss_sum", *loss_sum, DType::kF32, 2);
  if (scale != nullptr) CheckScalarTensor(op, "scale", *scale, DType::kF32, 1);
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  const DeviceContext& ctx = Context(logits.device());
  const RowsScratch scratch = NewRowsScratch(logits.device(), n);
  QueueCrossEntropyRows(op, ctx, logits, labels, label_smoothing, grad_scale,
                        scale != nullptr ? Ptr<float>(*scale) : nullptr, dlogits, scratch);
  QueueSumRows(ctx, scratch, labels, logits.dim(1),
               RowsSink{nullptr, Ptr<float>(*loss_sum), nullptr});
}

void TopKCorrectAccumulate(const Tensor& logits, const Tensor& labels, int k, Tensor* count) {
  const char* op = "TopKCorrectAccumulate";
  CheckLogits(op, logits, labels);
  CHECK_GT(k, 0) << op << ": k must be positive";
  CHECK(count != nullptr) << op << ": count is required";
  CheckScalarTensor(op, "count", *count, DType::kI32, 1);
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  const DeviceContext& ctx = Context(logits.device());
  const RowsScratch scratch = NewRowsScratch(logits.device(), n);
  QueueTopKRows(op, ctx, logits, labels, k, scratch);
  QueueSumRows(ctx, scratch, labels, logits.dim(1),
               RowsSink{nullptr, nullptr, Ptr<int32_t>(*count)});
}

}  // namespace cuda
}  // namespace tally
