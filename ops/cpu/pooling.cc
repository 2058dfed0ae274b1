// Max, average and global average pooling on NHWC tensors. The channel loop is innermost
// everywhere: channels are contiguous, so each window tap is one vectorised row operation.
// Parallelism is over (image, output row) for forward passes; backward passes scatter into
// dx, so they parallelise over images, whose dx planes do not overlap.
#include <algorithm>
#include <limits>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace tally {
namespace {

struct PoolDims {
  int64_t n, h, w, c, oh, ow;
};

PoolDims CheckPool(const char* op, const Tensor& x, const PoolParams& p, const Tensor& y) {
  CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32) << op << ": x " << x.ToString()
                                                              << " and y " << y.ToString()
                                                              << " must be float32";
  const Shape want = PoolOutputShape(x.shape(), p);
  CHECK(y.shape() == want) << op << ": y " << ShapeString(y.shape()) << " for x "
                           << ShapeString(x.shape()) << " should be " << ShapeString(want);
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), want[1], want[2]};
}

// The in-bounds window [h0, h1) x [w0, w1) of output position (i, j).
struct Window {
  int64_t h0, h1, w0, w1;
};
Window WindowAt(const PoolDims& d, const PoolParams& p, int64_t i, int64_t j) {
  const int64_t hs = i * p.stride_h - p.pad_h, ws = j * p.stride_w - p.pad_w;
  return {std::max<int64_t>(hs, 0), std::min<int64_t>(hs + p.kernel_h, d.h),
          std::max<int64_t>(ws, 0), std::min<int64_t>(ws + p.kernel_w, d.w)};
}

}  // namespace

Shape PoolOutputShape(const Shape& x, const PoolParams& p) {
  CHECK_EQ(x.size(), 4u) << "Pool: x " << ShapeString(x) << " must be [N,H,W,C]";
  CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0)
      << "Pool: bad kernel " << p.kernel_h << "x" << p.kernel_w << " or stride " << p.stride_h
      << "x" << p.stride_w;
  // pad < kernel guarantees every window holds at least one element of x.
  CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h < p.kernel_h && p.pad_w < p.kernel_w)
      << "Pool: pad " << p.pad_h << "x" << p.pad_w << " must be in [0, kernel "
      << p.kernel_h << "x" << p.kernel_w << ")";
  CHECK(x[1] + 2 * p.pad_h >= p.kernel_h && x[2] + 2 * p.pad_w >= p.kernel_w)
      << "Pool: kernel " << p.kernel_h << "x" << p.kernel_w << " larger than padded x "
      << ShapeString(x);
  return {x[0], (x[1] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1,
          (x[2] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1, x[3]};
}

void cpu::MaxPoolForward(const Tensor& x, const PoolParams& p, Tensor* y, Tensor* argmax) {
  const PoolDims d = CheckPool("MaxPoolForward", x, p, *y);
  CHECK(argmax->dtype() == DType::kI32 && argmax->shape() == y->shape())
      << "MaxPoolForward: argmax " << argmax->ToString() << " must be int32 of y's shape "
      << ShapeString(y->shape());
  const float* xp = x.data<float>();
  float* yp = y->data<float>();
  int32_t* ap = argmax->data<int32_t>();
  const int64_t C = d.c;
#pragma omp parallel for collapse(2) schedule(static) num_threads(cpu::ThreadsFor(x.numel()))
  for (int64_t n = 0; n < d.n; ++n) {
    for (int64_t i = 0; i < d.oh; ++i) {
      for (int64_t j = 0; j < d.ow; ++j) {
        const Window win = WindowAt(d, p, i, j);
        float* yr = yp + ((n * d.oh + i) * d.ow + j) * C;
        int32_t* ar = ap + ((n * d.oh + i) * d.ow + j) * C;
        for (int64_t c = 0; c < C; ++c) {
          yr[c] = -std::numeric_limits<float>::infinity();
          ar[c] = static_cast<int32_t>(win.h0 * d.w + win.w0);
        }
        for (int64_t h = win.h0; h < win.h1; ++h) {
          for (int64_t w = win.w0; w < win.w1; ++w) {
            const float* xr = xp + ((n * d.h + h) * d.w + w) * C;
            const int32_t flat = static_cast<int32_t>(h * d.w + w);
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              const bool better = xr[c] > yr[c];  // the first of equal maxima wins
              yr[c] = better ? xr[c] : yr[c];
              ar[c] = better ? flat : ar[c];
            }
          }
        }
      }
    }
  }
}

void cpu::MaxPoolBackward(const Tensor& dy, const Tensor& argmax, Tensor* dx) {
  CHECK(dy.dtype() == DType::kF32 && dx->dtype() == DType::kF32 && dy.ndim() == 4 &&
        dx->ndim() == 4 && dy.dim(0) == dx->dim(0) && dy.dim(3) == dx->dim(3))
      << "MaxPoolBackward: dy " << dy.ToString() << " and dx " << dx->ToString()
      << " disagree on images or channels";
  CHECK(argmax.dtype() == DType::kI32 && argmax.shape() == dy.shape())
      << "MaxPoolBackward: argmax " << argmax.ToString() << " must be int32 of dy's shape "
      << ShapeString(dy.shape());
  const int64_t N = dx->dim(0), plane = dx->dim(1) * dx->dim(2), C = dx->dim(3);
  const int64_t outs = dy.dim(1) * dy.dim(2);
  const float* dyp = dy.data<float>();
  const int32_t* ap = argmax.data<int32_t>();
  float* dxp = dx->data<float>();
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(dx->numel()))
  for (int64_t n = 0; n < N; ++n) {
    float* dxn = dxp + n * plane * C;
    std::fill(dxn, dxn + plane * C, 0.0f);
    for (int64_t o = 0; o < outs; ++o) {
      const float* g = dyp + (n * outs + o) * C;
      const int32_t* a = ap + (n * outs + o) * C;
      for (int64_t c = 0; c < C; ++c) {
        DCHECK(a[c] >= 0 && a[c] < plane);
        dxn[a[c] * C + c] += g[c];
      }
    }
  }
}

void cpu::AvgPoolForward(const Tensor& x, const PoolParams& p, Tensor* y) {
  const PoolDims d = CheckPool("AvgPoolForward", x, p, *y);
  const float* xp = x.data<float>();
  float* yp = y->data<float>();
  const int64_t C = d.c;
#pragma omp parallel for collapse(2) schedule(static) num_threads(cpu::ThreadsFor(x.numel()))
  for (int64_t n = 0; n < d.n; ++n) {
    for (int64_t i = 0; i < d.oh; ++i) {
      for (int64_t j = 0; j < d.ow; ++j) {
        const Window win = WindowAt(d, p, i, j);
        float* yr = yp + ((n * d.oh + i) * d.ow + j) * C;
        std::fill(yr, yr + C, 0.0f);
        for (int64_t h = win.h0; h < win.h1; ++h) {
          for (int64_t w = win.w0; w < win.w1; ++w) {
            const float* xr = xp + ((n * d.h + h) * d.w + w) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) yr[c] += xr[c];
          }
        }
        const float inv = 1.0f / static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
      }
    }
  }
}

void cpu::AvgPoolBackward(const Tensor& dy, const PoolParams& p, Tensor* dx) {
  const PoolDims d = CheckPool("AvgPoolBackward", *dx, p, dy);
  const float* dyp = dy.data<float>();
  float* dxp = dx->data<float>();
  const int64_t C = d.c;
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(dx->numel()))
  for (int64_t n = 0; n < d.n; ++n) {
    float* dxn = dxp + n * d.h * d.w * C;
    std::fill(dxn, dxn + d.h * d.w * C, 0.0f);
    for (int64_t i = 0; i < d.oh; ++i) {
      for (int64_t j = 0; j < d.ow; ++j) {
        const Window win = WindowAt(d, p, i, j);
        const float* g = dyp + ((n * d.oh + i) * d.ow + j) * C;
        const float inv = 1.0f / static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
        for (int64_t h = win.h0; h < win.h1; ++h) {
          for (int64_t w = win.w0; w < win.w1; ++w) {
            float* dr = dxn + (h * d.w + w) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) dr[c] += g[c] * inv;
          }
        }
      }
    }
  }
}

void cpu::GlobalAvgPoolForward(const Tensor& x, Tensor* y) {
  CHECK(x.dtype() == DType::kF32 && y->dtype() == DType::kF32 && x.ndim() == 4 &&
        y->shape() == Shape({x.dim(0), x.dim(3)}))
      << "GlobalAvgPoolForward: x " << x.ToString() << " and y " << y->ToString()
      << " must be float32 [N,H,W,C] and [N,C]";
  const int64_t N = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
  const float* xp = x.data<float>();
  float* yp = y->data<float>();
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for schedule(static) num_threads(cpu::ThreadsFor(x.numel()))
  for (int64_t n = 0; n < N; ++n) {
    float* yr = yp + n * C;
    std::fill(yr, yr + C, 0.0f);
    for (int64_t s = 0; s < hw; ++s) {
      const float* xr = xp + (n * hw + s) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] += xr[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
  }
}

void cpu::GlobalAvgPoolBackward(const Tensor& dy, Tensor* dx) {
  CHECK(dy.dtype() == DType::kF32 && dx->dtype() == DType::kF32 && dx->ndim() == 4 &&
        dy.shape() == Shape({dx->dim(0), dx->dim(3)}))
      << "GlobalAvgPoolBackward: dy " << dy.ToString() << " and dx " << dx->ToString()
      << " must be float32 [N,C] and [N,H,W,C]";
  const int64_t N = dx->dim(0), hw = dx->dim(1) * dx->dim(2), C = dx->dim(3);
  const float* dyp = dy.data<float>();
  float* dxp = dx->data<float>();
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for collapse(2) schedule(static) num_threads(cpu::ThreadsFor(dx->numel()))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t s = 0; s < hw; ++s) {
      const float* g = dyp + n * C;
      float* dr = dxp + (n * hw + s) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dr[c] = g[c] * inv;
    }
  }
}

}  // namespace tally
