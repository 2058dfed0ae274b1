// Batch normalisation over the rows of an NHWC tensor seen as [M, C] (M = N * H * W).
//
// Per-channel sums run in double: a channel of an early ResNet layer has ~400k values per
// batch, and a float sum of that many loses digits the variance needs. Each thread sums a
// contiguous block of rows into its own 64-byte-aligned slot of a partials array (no false
// sharing), and the slots are added in thread order, so results do not depend on timing.
// The forward sums are taken about a shift (the first row) so that the variance does not
// come from the difference of two large numbers when the mean is far from zero.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace tally {
namespace {

struct Dims {
  int64_t rows, channels;
};

Dims CheckDims(const char* op, const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
  CHECK(x.dtype() == DType::kF32 && (x.ndim() == 4 || x.ndim() == 2))
      << op << ": x " << x.ToString() << " must be float32 [N,H,W,C] or [N,C]";
  Dims d{x.numel() / std::max<int64_t>(x.dim(-1), 1), x.dim(-1)};
  for (const Tensor* t : per_channel) {
    CHECK(t->dtype() == DType::kF32 && t->ndim() == 1 && t->dim(0) == d.channels)
        << op << ": per-channel tensor " << t->ToString() << " does not match x "
        << ShapeString(x.shape()) << " with " << d.channels << " channels";
  }
  return d;
}

void CheckSameShape(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  CHECK(t.dtype() == DType::kF32 && t.shape() == x.shape())
      << op << ": " << name << " " << t.ToString() << " must match x " << x.ToString();
}

// Channel count rounded up to whole cache lines of doubles.
int64_t PaddedChannels(int64_t c) { return (c + 7) / 8 * 8; }

// sum_a[c] = sum over rows of a[r, c] - shift_a[c]; sum_ab[c] = sum of (a - shift_a) * (b - shift_b).
// With b == a this gives the sums of the forward pass; with a = dy, b = x those of the backward.
// Result slots are added over threads into sum_a and sum_ab (size channels each).
void ChannelSums(const float* a, const float* b, const float* shift_a, const float* shift_b,
                 Dims d, double* sum_a, double* sum_ab) {
  const int64_t cp = PaddedChannels(d.channels);
  const int nt = cpu::ThreadsFor(d.rows * d.channels);
  std::vector<double> partial(static_cast<size_t>(2 * cp * nt), 0.0);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    int64_t begin, end;
    cpu::ThreadRange(d.rows, t, team, &begin, &end);
    double* sa = partial.data() + 2 * cp * t;
    double* sab = sa + cp;
    const int64_t C = d.channels;
    for (int64_t r = begin; r < end; ++r) {
      const float* ar = a + r * C;
      const float* br = b + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const double da = static_cast<double>(ar[c] - shift_a[c]);
        const double db = static_cast<double>(br[c] - shift_b[c]);
        sa[c] += da;
        sab[c] += da * db;
      }
    }
  }
  for (int64_t c = 0; c < d.channels; ++c) sum_a[c] = sum_ab[c] = 0.0;
  for (int t = 0; t < nt; ++t) {
    for (int64_t c = 0; c < d.channels; ++c) {
      sum_a[c] += partial[2 * cp * t + c];
      sum_ab[c] += partial[2 * cp * t + cp + c];
    }
  }
}

// y[r, c] = x[r, c] * scale[c] + bias[c]
void ScaleShift(const float* x, const float* scale, const float* bias, Dims d, float* y) {
  const int64_t C = d.channels;
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(d.rows * C))
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * scale[c] + bias[c];
  }
}

// dx = a[c] * dy + b[c] * (x - mean[c]) + k[c]; the gradient of both BN forms.
void BackwardData(const float* x, const float* dy, const float* mean, const float* a,
                  const float* b, const float* k, Dims d, float* dx) {
  const int64_t C = d.channels;
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(d.rows * C))
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    float* dxr = dx + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dxr[c] = a[c] * dyr[c] + b[c] * (xr[c] - mean[c]) + k[c];
  }
}

}  // namespace

void cpu::BatchNormForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const BatchNormParams& p, Tensor* running_mean, Tensor* running_var,
                              Tensor* y, Tensor* save_mean, Tensor* save_inv_std) {
  const char* op = "BatchNormForwardTraining";
  Dims d = CheckDims(op, x, {&gamma, &beta, running_mean, running_var, save_mean, save_inv_std});
  CheckSameShape(op, "y", *y, x);
  CHECK_GT(d.rows, 0) << op << ": empty batch " << ShapeString(x.shape());
  const float* xp = x.data<float>();
  const int64_t C = d.channels;
  std::vector<double> sum(C), sumsq(C);
  ChannelSums(xp, xp, xp, xp, d, sum.data(), sumsq.data());  // shifted by the first row

  std::vector<float> scale(C), bias(C);
  const float* g = gamma.data<float>();
  const float* bt = beta.data<float>();
  float* rm = running_mean->data<float>();
  float* rv = running_var->data<float>();
  float* sm = save_mean->data<float>();
  float* si = save_inv_std->data<float>();
  const double m = static_cast<double>(d.rows);
  const double momentum = p.momentum;
  for (int64_t c = 0; c < C; ++c) {
    const double shifted_mean = sum[c] / m;
    const double mean = xp[c] + shifted_mean;
    const double var = std::max(sumsq[c] / m - shifted_mean * shifted_mean, 0.0);
    const double inv_std = 1.0 / std::sqrt(var + p.eps);
    const double unbiased = d.rows > 1 ? var * m / (m - 1.0) : var;
    sm[c] = static_cast<float>(mean);
    si[c] = static_cast<float>(inv_std);
    rm[c] = static_cast<float>(momentum * rm[c] + (1.0 - momentum) * mean);
    rv[c] = static_cast<float>(momentum * rv[c] + (1.0 - momentum) * unbiased);
    scale[c] = static_cast<float>(g[c] * inv_std);
    bias[c] = static_cast<float>(bt[c] - mean * g[c] * inv_std);
  }
  ScaleShift(xp, scale.data(), bias.data(), d, y->data<float>());
}

void cpu::BatchNormForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const BatchNormParams& p, Tensor* y) {
  const char* op = "BatchNormForwardInference";
  Dims d = CheckDims(op, x, {&gamma, &beta, &running_mean, &running_var});
  CheckSameShape(op, "y", *y, x);
  std::vector<float> scale(d.channels), bias(d.channels);
  for (int64_t c = 0; c < d.channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var.data<float>()[c]) + p.eps);
    const double g = gamma.data<float>()[c];
    scale[c] = static_cast<float>(g * inv_std);
    bias[c] = static_cast<float>(beta.data<float>()[c] - running_mean.data<float>()[c] * g * inv_std);
  }
  ScaleShift(x.data<float>(), scale.data(), bias.data(), d, y->data<float>());
}

void cpu::BatchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                       const Tensor& save_mean, const Tensor& save_inv_std, Tensor* dx,
                       Tensor* dgamma, Tensor* dbeta) {
  const char* op = "BatchNormBackward";
  Dims d = CheckDims(op, x, {&gamma, &save_mean, &save_inv_std, dgamma, dbeta});
  CheckSameShape(op, "dy", dy, x);
  CheckSameShape(op, "dx", *dx, x);
  const int64_t C = d.channels;
  const float* mean = save_mean.data<float>();
  const float* inv_std = save_inv_std.data<float>();
  std::vector<float> zero(C, 0.0f);
  std::vector<double> sum_dy(C), sum_dy_xc(C);
  ChannelSums(dy.data<float>(), x.data<float>(), zero.data(), mean, d, sum_dy.data(),
              sum_dy_xc.data());
  // dx = gamma * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat = (x - mean) * inv_std
  std::vector<float> a(C), b(C), k(C);
  const double m = static_cast<double>(d.rows);
  for (int64_t c = 0; c < C; ++c) {
    const double is = inv_std[c], g = gamma.data<float>()[c];
    const double dg = sum_dy_xc[c] * is;
    dgamma->data<float>()[c] = static_cast<float>(dg);
    dbeta->data<float>()[c] = static_cast<float>(sum_dy[c]);
    a[c] = static_cast<float>(g * is);
    b[c] = static_cast<float>(-g * is * is * dg / m);
    k[c] = static_cast<float>(-g * is * sum_dy[c] / m);
  }
  BackwardData(x.data<float>(), dy.data<float>(), mean, a.data(), b.data(), k.data(), d,
               dx->data<float>());
}

void cpu::BatchNormBackwardInference(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                const Tensor& running_mean, const Tensor& running_var,
                                const BatchNormParams& p, Tensor* dx, Tensor* dgamma,
                                Tensor* dbeta) {
  const char* op = "BatchNormBackwardInference";
  Dims d = CheckDims(op, x, {&gamma, &running_mean, &running_var, dgamma, dbeta});
  CheckSameShape(op, "dy", dy, x);
  CheckSameShape(op, "dx", *dx, x);
  const int64_t C = d.channels;
  const float* mean = running_mean.data<float>();
  std::vector<float> zero(C, 0.0f);
  std::vector<double> sum_dy(C), sum_dy_xc(C);
  ChannelSums(dy.data<float>(), x.data<float>(), zero.data(), mean, d, sum_dy.data(),
              sum_dy_xc.data());
  std::vector<float> a(C);
  for (int64_t c = 0; c < C; ++c) {
    const double is = 1.0 / std::sqrt(static_cast<double>(running_var.data<float>()[c]) + p.eps);
    dgamma->data<float>()[c] = static_cast<float>(sum_dy_xc[c] * is);
    dbeta->data<float>()[c] = static_cast<float>(sum_dy[c]);
    a[c] = static_cast<float>(gamma.data<float>()[c] * is);
  }
  BackwardData(x.data<float>(), dy.data<float>(), mean, a.data(), zero.data(), zero.data(), d,
               dx->data<float>());
}

// The fused op's reference: the three ops of the CPU path in sequence.
void cpu::BatchNormAddReluForwardTraining(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                          const Tensor& beta, const BatchNormParams& p, bool relu,
                                          Tensor* running_mean, Tensor* running_var, Tensor* y,
                                          Tensor* save_mean, Tensor* save_inv_std) {
  cpu::BatchNormForwardTraining(x, gamma, beta, p, running_mean, running_var, y, save_mean,
                                save_inv_std);
  if (z != nullptr) cpu::Add(*y, *z, y);
  if (relu) cpu::ReluForward(*y, y);
}

void cpu::BatchNormAddReluForwardInference(const Tensor& x, const Tensor* z, const Tensor& gamma,
                                           const Tensor& beta, const Tensor& running_mean,
                                           const Tensor& running_var, const BatchNormParams& p,
                                           bool relu, Tensor* y) {
  cpu::BatchNormForwardInference(x, gamma, beta, running_mean, running_var, p, y);
  if (z != nullptr) cpu::Add(*y, *z, y);
  if (relu) cpu::ReluForward(*y, y);
}

void cpu::BatchNormAddReluBackward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                   const Tensor& gamma, const Tensor& save_mean,
                                   const Tensor& save_inv_std, bool relu, Tensor* dx, Tensor* dz,
                                   Tensor* dgamma, Tensor* dbeta) {
  Tensor masked = dy;
  if (relu) {
    masked = Tensor::Empty(dy.shape(), dy.dtype());
    cpu::ReluBackward(y, dy, &masked);
  }
  if (dz != nullptr) dz->CopyFrom(masked);
  cpu::BatchNormBackward(x, masked, gamma, save_mean, save_inv_std, dx, dgamma, dbeta);
}

}  // namespace tally
