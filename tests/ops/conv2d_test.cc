// Conv2d against a naive double-precision convolution, its gradients against finite
// differences, and the implementation oneDNN picks for ResNet-50's shapes.
#include <gtest/gtest.h>

#include "ops/cpu/conv2d_impl.h"
#include "ops/ops.h"
#include "tests/gradient_check.h"

namespace tally {
namespace {

using testing::Dot;
using testing::ExpectAllNear;
using testing::ExpectGradientNear;
using testing::Filled;
using testing::RandomTensor;

struct Case {
  Shape x, w;
  ConvParams p;
};

// y[n,i,j,k] = sum_{r,s,c} x[n, i*sh - ph + r, j*sw - pw + s, c] * w[k,r,s,c]
std::vector<double> NaiveConv(const Tensor& x, const Tensor& w, const ConvParams& p) {
  const Shape ys = Conv2dOutputShape(x.shape(), w.shape(), p);
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const int64_t K = w.dim(0), R = w.dim(1), S = w.dim(2), OH = ys[1], OW = ys[2];
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  std::vector<double> y(NumElements(ys), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j)
        for (int64_t k = 0; k < K; ++k) {
          double acc = 0.0;
          for (int64_t r = 0; r < R; ++r)
            for (int64_t s = 0; s < S; ++s) {
              const int64_t h = i * p.stride_h - p.pad_h + r, v = j * p.stride_w - p.pad_w + s;
              if (h < 0 || h >= H || v < 0 || v >= W) continue;
              for (int64_t c = 0; c < C; ++c)
                acc += static_cast<double>(xp[((n * H + h) * W + v) * C + c]) *
                       wp[((k * R + r) * S + s) * C + c];
            }
          y[((n * OH + i) * OW + j) * K + k] = acc;
        }
  return y;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{2, 5, 5, 3}, {4, 1, 1, 3}, {1, 1, 0, 0}},    // 1x1
      {{2, 7, 6, 5}, {3, 3, 3, 5}, {1, 1, 1, 1}},    // 3x3 same, odd sizes
      {{1, 9, 9, 4}, {6, 3, 3, 4}, {2, 2, 1, 1}},    // 3x3 stride 2
      {{2, 6, 6, 8}, {16, 1, 1, 8}, {2, 2, 0, 0}},   // 1x1 stride 2 on even input (taps unused)
      {{1, 11, 13, 3}, {8, 7, 7, 3}, {2, 2, 3, 3}},  // 7x7 stride 2 pad 3 (the stem)
      {{2, 8, 7, 3}, {5, 3, 2, 3}, {2, 1, 1, 0}},    // non-square kernel, stride and pad
      {{1, 6, 5, 2}, {3, 1, 3, 2}, {1, 2, 0, 2}},
  };
  return cases;
}

TEST(Conv2dTest, OutputShape) {
  EXPECT_EQ(Conv2dOutputShape({32, 224, 224, 3}, {64, 7, 7, 3}, {2, 2, 3, 3}),
            Shape({32, 112, 112, 64}));
  EXPECT_EQ(Conv2dOutputShape({32, 56, 56, 256}, {512, 1, 1, 256}, {2, 2, 0, 0}),
            Shape({32, 28, 28, 512}));
  EXPECT_EQ(Conv2dOutputShape({2, 8, 7, 3}, {5, 3, 2, 3}, {2, 1, 1, 0}), Shape({2, 4, 6, 5}));
}

TEST(Conv2dTest, ForwardMatchesNaive) {
  Rng rng(1);
  for (const Case& c : Cases()) {
    Tensor x = RandomTensor(c.x, &rng), w = RandomTensor(c.w, &rng);
    Tensor y = Tensor::Empty(Conv2dOutputShape(c.x, c.w, c.p), DType::kF32);
    Conv2dForward(x, w, c.p, &y);
    // fp32 accumulation of at most 7*7*3 products of values in [-1, 1].
    ExpectAllNear("y for x " + ShapeString(c.x) + " w " + ShapeString(c.w), y,
                  NaiveConv(x, w, c.p), 1e-5, 1e-5);
  }
}

TEST(Conv2dTest, BackwardMatchesFiniteDifferences) {
  Rng rng(2);
  for (const Case& c : Cases()) {
    const std::string name = "x " + ShapeString(c.x) + " w " + ShapeString(c.w);
    Tensor x = RandomTensor(c.x, &rng), w = RandomTensor(c.w, &rng);
    const Shape ys = Conv2dOutputShape(c.x, c.w, c.p);
    Tensor y = Tensor::Empty(ys, DType::kF32);
    Tensor r = RandomTensor(ys, &rng);
    auto loss = [&] {
      Conv2dForward(x, w, c.p, &y);
      return Dot(y, r);
    };
    Tensor dx = Filled(c.x, 7.0f), dw = Filled(c.w, 7.0f);  // must be overwritten
    Conv2dBackwardData(r, w, c.p, &dx);
    Conv2dBackwardFilter(x, r, c.p, &dw);
    ExpectGradientNear("dx for " + name, loss, &x, dx);
    ExpectGradientNear("dw for " + name, loss, &w, dw);
  }
}

TEST(Conv2dTest, ResNet50ShapesUseJitKernels) {
  struct Layer {
    Shape x, w;
    ConvParams p;
  };
  const std::vector<Layer> layers = {
      {{32, 224, 224, 3}, {64, 7, 7, 3}, {2, 2, 3, 3}},
      {{32, 56, 56, 64}, {64, 3, 3, 64}, {1, 1, 1, 1}},
      {{32, 56, 56, 256}, {64, 1, 1, 256}, {1, 1, 0, 0}},
      {{32, 56, 56, 256}, {512, 1, 1, 256}, {2, 2, 0, 0}},
      {{32, 28, 28, 128}, {128, 3, 3, 128}, {1, 1, 1, 1}},
      {{32, 14, 14, 256}, {1024, 1, 1, 256}, {1, 1, 0, 0}},
      {{32, 7, 7, 512}, {512, 3, 3, 512}, {1, 1, 1, 1}},
  };
  for (const Layer& l : layers) {
    for (auto pass : {cpu::ConvPass::kForward, cpu::ConvPass::kBackwardData,
                      cpu::ConvPass::kBackwardFilter}) {
      // The stem's input gradient is never computed in training.
      if (l.x[3] == 3 && pass == cpu::ConvPass::kBackwardData) continue;
      const std::string impl = cpu::Conv2dImplementation(l.x, l.w, l.p, pass);
      // jit direct kernels ("jit:avx512_core") or brgemm-based ones ("brgconv:..."), never the
      // reference loops ("ref:any") nor im2col + GEMM ("gemm:jit").
      const bool direct_jit = impl.rfind("jit", 0) == 0 || impl.rfind("brgconv", 0) == 0;
      EXPECT_TRUE(direct_jit && impl.find("gemm") == std::string::npos) << "x " << ShapeString(l.x) << " w " << ShapeString(l.w)
                                          << " pass " << static_cast<int>(pass) << ": " << impl;
    }
  }
}

TEST(Conv2dDeathTest, ChannelMismatchNamesOpAndShapes) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor x = Tensor::Zeros({1, 4, 4, 3}, DType::kF32), w = Tensor::Zeros({2, 3, 3, 5}, DType::kF32);
  Tensor y = Tensor::Zeros({1, 2, 2, 2}, DType::kF32);
  EXPECT_DEATH(Conv2dForward(x, w, {}, &y), "x \\[1,4,4,3\\] and w \\[2,3,3,5\\] disagree on channels");
  Tensor w_ok = Tensor::Zeros({2, 3, 3, 3}, DType::kF32);
  Tensor y_bad = Tensor::Zeros({1, 3, 2, 2}, DType::kF32);
  EXPECT_DEATH(Conv2dForward(x, w_ok, {}, &y_bad), "Conv2dForward: y \\[1,3,2,2\\]");
}

}  // namespace
}  // namespace tally
