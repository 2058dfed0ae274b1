// The arithmetic of the CUDA batch-norm and pooling kernels (ops/cuda/*_math.cuh) run on the
// host against the CPU ops, so that it is checked on machines without a GPU: the batch-norm
// statistics reduced in the kernels' own partition and order, the per-channel coefficients,
// and the geometry of the pooling backward gathers. The launches themselves are covered by
// tests/ops/cuda_*_test.cc where a GPU is present.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/backends.h"
#include "ops/cuda/batch_norm_math.cuh"
#include "ops/cuda/pooling_math.cuh"
#include "tests/gradient_check.h"

namespace tally {
namespace cuda {
namespace {

using testing::ExpectAllNear;
using testing::RandomTensor;

constexpr int kFinalizeDepth = kBnFinalizeDepth;

// Per channel: count, mean and m2 of x - x0 as the stats kernel and the forward finalize
// compute them: Welford per thread over rows ty, ty + p.ty, ... of a chunk; a tree over the
// block's thread rows in float; chunks merged in double by lanes and a tree over the lanes.
struct ChannelStats {
  double count, x0, mean, m2;
};

ChannelStats KernelStats(const float* x, int64_t rows, int64_t channels, int64_t c,
                         const BnPartition& p) {
  const float x0 = x[c];
  std::vector<double> lane_n(kFinalizeDepth, 0.0), lane_mean(kFinalizeDepth, 0.0),
      lane_m2(kFinalizeDepth, 0.0);
  for (int64_t q = 0; q < p.chunks; ++q) {
    const int64_t begin = q * p.rows_per_chunk;
    const int64_t end = std::min(begin + p.rows_per_chunk, rows);
    std::vector<float> n(p.ty, 0.0f), mean(p.ty, 0.0f), m2(p.ty, 0.0f);
    for (int t = 0; t < p.ty; ++t) {
      for (int64_t r = begin + t; r < end; r += p.ty) {
        n[t] += 1.0f;
        WelfordAdd(x[r * channels + c] - x0, 1.0f / n[t], &mean[t], &m2[t]);
      }
    }
    for (int half = p.ty / 2; half > 0; half /= 2) {
      for (int t = 0; t < half; ++t) {
        WelfordMerge(n[t], n[t + half], &mean[t], &m2[t], mean[t + half], m2[t + half]);
        n[t] += n[t + half];
      }
    }
    const int lane = static_cast<int>(q % kFinalizeDepth);
    const double nb = static_cast<double>(ChunkRows(rows, p.rows_per_chunk, q));
    EXPECT_EQ(nb, n[0]) << "chunk " << q;
    WelfordMerge<double>(lane_n[lane], nb, &lane_mean[lane], &lane_m2[lane], mean[0], m2[0]);
    lane_n[lane] += nb;
  }
  for (int half = kFinalizeDepth / 2; half > 0; half /= 2) {
    for (int t = 0; t < half; ++t) {
      WelfordMerge<double>(lane_n[t], lane_n[t + half], &lane_mean[t], &lane_m2[t],
                           lane_mean[t + half], lane_m2[t + half]);
      lane_n[t] += lane_n[t + half];
    }
  }
  return {lane_n[0], x0, lane_mean[0], lane_m2[0]};
}

// Sums of dy and dy * (x - mean) as the backward reduce kernel and finalize add them.
void KernelBackwardSums(const float* x, const float* dy, const float* mean, int64_t rows,
                        int64_t channels, int64_t c, const BnPartition& p, double* sum_dy,
                        double* sum_dy_xc) {
  std::vector<double> lane_a(kFinalizeDepth, 0.0), lane_b(kFinalizeDepth, 0.0);
  for (int64_t q = 0; q < p.chunks; ++q) {
    const int64_t begin = q * p.rows_per_chunk;
    const int64_t end = std::min(begin + p.rows_per_chunk, rows);
    std::vector<float> a(p.ty, 0.0f), b(p.ty, 0.0f);
    for (int t = 0; t < p.ty; ++t) {
      for (int64_t r = begin + t; r < end; r += p.ty) {
        const float g = dy[r * channels + c];
        a[t] += g;
        b[t] += g * (x[r * channels + c] - mean[c]);
      }
    }
    for (int half = p.ty / 2; half > 0; half /= 2) {
      for (int t = 0; t < half; ++t) a[t] += a[t + half], b[t] += b[t + half];
    }
    lane_a[q % kFinalizeDepth] += a[0];
    lane_b[q % kFinalizeDepth] += b[0];
  }
  for (int half = kFinalizeDepth / 2; half > 0; half /= 2) {
    for (int t = 0; t < half; ++t) lane_a[t] += lane_a[t + half], lane_b[t] += lane_b[t + half];
  }
  *sum_dy = lane_a[0];
  *sum_dy_xc = lane_b[0];
}

TEST(CudaMathTest, PartitionCoversEveryRowAndChannel) {
  for (const Shape& s : {Shape{256, 112, 112, 64}, Shape{256, 56, 56, 256}, Shape{256, 7, 7, 2048},
                         Shape{2, 5, 3, 7}, Shape{1, 1, 1, 3}, Shape{37, 19}}) {
    const int64_t C = s.back(), M = NumElements(s) / C;
    for (int vec : {1, 4, 8}) {
      if (C % vec != 0) continue;
      const BnPartition p = PartitionRows(M, C, vec);
      const std::string what = ShapeString(s) + " vec " + std::to_string(vec);
      EXPECT_EQ(p.tx * p.ty, kBnThreads) << what;
      EXPECT_GE(int64_t{p.tiles} * p.tx * vec, C) << what;
      EXPECT_LT(int64_t{p.tiles - 1} * p.tx * vec, C) << what;
      EXPECT_GE(p.chunks * p.rows_per_chunk, M) << what;
      EXPECT_LT((p.chunks - 1) * p.rows_per_chunk, M) << what;
      EXPECT_LE(p.chunks, 65535) << what;
      // ResNet-50's layers at batch 256 give every one of 132 SMs several blocks.
      if (s[0] == 256) {
        EXPECT_GE(p.chunks * p.tiles, 4 * 132) << what;
      }
    }
  }
}

TEST(CudaMathTest, WelfordMergeMatchesOnePass) {
  Rng rng(7);
  std::vector<float> v(1000);
  for (float& f : v) f = 5.0f + rng.Uniform();
  double mean = 0.0, m2 = 0.0;
  for (float f : v) mean += f;
  mean /= v.size();
  for (float f : v) m2 += (f - mean) * (f - mean);
  for (size_t split : {1u, 333u, 999u}) {
    float na = 0, ma = 0, qa = 0, nb = 0, mb = 0, qb = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i < split) {
        na += 1.0f;
        WelfordAdd(v[i], 1.0f / na, &ma, &qa);
      } else {
        nb += 1.0f;
        WelfordAdd(v[i], 1.0f / nb, &mb, &qb);
      }
    }
    WelfordMerge(na, nb, &ma, &qa, mb, qb);
    EXPECT_NEAR(ma, mean, 1e-5) << split;
    EXPECT_NEAR(qa, m2, 1e-4 * m2) << split;
  }
  // An empty side changes nothing.
  float m = 2.0f, q = 3.0f;
  WelfordMerge(4.0f, 0.0f, &m, &q, 100.0f, 100.0f);
  EXPECT_EQ(m, 2.0f);
  EXPECT_EQ(q, 3.0f);
  q = 0.0f;  // what a side without values holds
  WelfordMerge(0.0f, 4.0f, &m, &q, 7.0f, 1.0f);
  EXPECT_EQ(m, 7.0f);
  EXPECT_EQ(q, 1.0f);
}

// The statistics of the training forward, reduced as the kernels do, against the CPU op.
void CheckForwardStats(const Shape& shape, float lo, float hi, double inv_std_rtol) {
  Rng rng(11);
  const int64_t C = shape.back(), M = NumElements(shape) / C;
  BatchNormParams bp;
  bp.eps = 1e-3f;
  bp.momentum = 0.8f;
  Tensor x = RandomTensor(shape, &rng, lo, hi);
  Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f), beta = RandomTensor({C}, &rng);
  Tensor rm = RandomTensor({C}, &rng), rv = RandomTensor({C}, &rng, 0.5f, 1.5f);
  Tensor rm_cpu = rm.Clone(), rv_cpu = rv.Clone();
  Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({C}, DType::kF32);
  Tensor inv_std = Tensor::Empty({C}, DType::kF32);
  cpu::BatchNormForwardTraining(x, gamma, beta, bp, &rm_cpu, &rv_cpu, &y, &mean, &inv_std);

  for (int vec : {1, 8}) {
    if (C % vec != 0) continue;
    const BnPartition p = PartitionRows(M, C, vec);
    std::vector<double> got_mean(C), got_is(C), got_rm(C), got_rv(C), got_y(x.numel());
    for (int64_t c = 0; c < C; ++c) {
      const ChannelStats s = KernelStats(x.data<float>(), M, C, c, p);
      ASSERT_EQ(s.count, static_cast<double>(M));
      const BnForwardChannel r =
          BnTrainingChannel(s.count, s.x0 + s.mean, s.m2, bp.eps, bp.momentum,
                            gamma.data<float>()[c], beta.data<float>()[c], rm.data<float>()[c],
                            rv.data<float>()[c]);
      got_mean[c] = r.save_mean, got_is[c] = r.save_inv_std;
      got_rm[c] = r.running_mean, got_rv[c] = r.running_var;
      for (int64_t m = 0; m < M; ++m) {
        got_y[m * C + c] = BnAddRelu(x.data<float>()[m * C + c], r.scale, r.shift, 0.0f, false);
      }
    }
    const std::string what = ShapeString(shape) + " vec " + std::to_string(vec);
    ExpectAllNear("save_mean " + what, mean, got_mean, 1e-6, 1e-6);
    ExpectAllNear("save_inv_std " + what, inv_std, got_is, 0, inv_std_rtol);
    ExpectAllNear("running_mean " + what, rm_cpu, got_rm, 1e-6, 1e-6);
    ExpectAllNear("running_var " + what, rv_cpu, got_rv, 1e-6, 1e-5);
    // y = x * scale + shift cancels digits when the mean dwarfs the spread, in both ops.
    if (std::abs(lo) < 100.0f) ExpectAllNear("y " + what, y, got_y, 1e-5, 1e-5);
  }
}

TEST(CudaMathTest, ForwardStatisticsMatchCpu) {
  CheckForwardStats({4, 28, 28, 64}, 2.0f, 4.0f, 1e-5);
  CheckForwardStats({2, 5, 3, 7}, -1.0f, 1.0f, 1e-5);
  CheckForwardStats({37, 19}, -1.0f, 3.0f, 1e-5);
  CheckForwardStats({1, 1, 1, 8}, -1.0f, 1.0f, 1e-5);  // one row: unbiased = biased
}

// A large mean and a small spread: the float Welford sums about the first row keep the
// variance, as the CPU op's double sums do.
TEST(CudaMathTest, VarianceSurvivesLargeMean) {
  CheckForwardStats({8, 32, 32, 8}, 1000.0f, 1000.01f, 1e-6);
}

TEST(CudaMathTest, InferenceScaleShiftMatchesCpu) {
  Rng rng(12);
  const Shape shape{3, 4, 5, 6};
  BatchNormParams bp;
  Tensor x = RandomTensor(shape, &rng), gamma = RandomTensor({6}, &rng);
  Tensor beta = RandomTensor({6}, &rng), z = RandomTensor(shape, &rng);
  Tensor rm = RandomTensor({6}, &rng), rv = RandomTensor({6}, &rng, 0.1f, 2.0f);
  for (bool relu : {false, true}) {
    Tensor y = Tensor::Empty(shape, DType::kF32);
    cpu::BatchNormAddReluForwardInference(x, &z, gamma, beta, rm, rv, bp, relu, &y);
    std::vector<double> want(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = i % 6;
      float scale, shift;
      BnInferenceScaleShift(gamma.data<float>()[c], beta.data<float>()[c], rm.data<float>()[c],
                            rv.data<float>()[c], bp.eps, &scale, &shift);
      want[i] = BnAddRelu(x.data<float>()[i], scale, shift, z.data<float>()[i], relu);
    }
    ExpectAllNear(relu ? "y relu" : "y", y, want, 1e-6, 1e-6);
  }
}

TEST(CudaMathTest, BackwardCoefficientsMatchCpu) {
  Rng rng(13);
  for (const Shape& shape : {Shape{8, 14, 14, 64}, Shape{3, 5, 7, 12}, Shape{9, 5}}) {
    const int64_t C = shape.back(), M = NumElements(shape) / C;
    BatchNormParams bp;
    Tensor x = RandomTensor(shape, &rng, -1.0f, 3.0f), dy = RandomTensor(shape, &rng);
    Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f);
    Tensor mean = RandomTensor({C}, &rng, 0.5f, 1.5f);
    Tensor inv_std = RandomTensor({C}, &rng, 0.5f, 2.0f);
    Tensor rv = RandomTensor({C}, &rng, 0.2f, 2.0f);
    const BnPartition p = PartitionRows(M, C, 1);
    for (bool batch_stats : {true, false}) {
      Tensor dx = Tensor::Empty(shape, DType::kF32), dgamma = Tensor::Empty({C}, DType::kF32);
      Tensor dbeta = Tensor::Empty({C}, DType::kF32);
      if (batch_stats) {
        cpu::BatchNormBackward(x, dy, gamma, mean, inv_std, &dx, &dgamma, &dbeta);
      } else {
        cpu::BatchNormBackwardInference(x, dy, gamma, mean, rv, bp, &dx, &dgamma, &dbeta);
      }
      std::vector<double> want_dx(x.numel()), want_dg(C), want_db(C);
      for (int64_t c = 0; c < C; ++c) {
        double sum_dy, sum_dy_xc;
        KernelBackwardSums(x.data<float>(), dy.data<float>(), mean.data<float>(), M, C, c, p,
                           &sum_dy, &sum_dy_xc);
        const double is = batch_stats ? inv_std.data<float>()[c]
                                      : BnInvStd(rv.data<float>()[c], bp.eps);
        const BnBackwardChannel r = BnBackwardCoefficients(
            sum_dy, sum_dy_xc, static_cast<double>(M), gamma.data<float>()[c], is, batch_stats);
        want_dg[c] = r.dgamma, want_db[c] = r.dbeta;
        for (int64_t m = 0; m < M; ++m) {
          const int64_t i = m * C + c;
          want_dx[i] = BnBackwardDx(dy.data<float>()[i], x.data<float>()[i], mean.data<float>()[c],
                                    r.a, r.b, r.k);
        }
      }
      const std::string what = ShapeString(shape) + (batch_stats ? " training" : " inference");
      ExpectAllNear("dx " + what, dx, want_dx, 1e-5, 1e-5);
      ExpectAllNear("dgamma " + what, dgamma, want_dg, 1e-4, 1e-5);
      ExpectAllNear("dbeta " + what, dbeta, want_db, 1e-4, 1e-5);
    }
  }
}

// ---- pooling ----

struct PoolCase {
  Shape x;
  PoolParams p;
};

const std::vector<PoolCase>& PoolCases() {
  static const std::vector<PoolCase> cases = {
      {{2, 112, 112, 4}, {3, 3, 2, 2, 1, 1}},  // ResNet's stem pool
      {{2, 9, 9, 3}, {3, 3, 2, 2, 1, 1}},
      {{1, 8, 6, 5}, {2, 2, 2, 2, 0, 0}},
      {{2, 7, 5, 4}, {3, 2, 1, 2, 1, 0}},
      {{1, 5, 7, 17}, {3, 3, 1, 1, 2, 1}},
      {{1, 10, 4, 2}, {5, 4, 1, 3, 4, 3}},  // windows much wider than the stride
      {{3, 6, 6, 2}, {1, 1, 3, 3, 0, 0}},   // inputs no window reaches
  };
  return cases;
}

TEST(CudaMathTest, WindowsAndCoveringOutputsMatchBruteForce) {
  for (int size = 1; size <= 12; ++size) {
    for (int kernel = 1; kernel <= 5; ++kernel) {
      for (int stride = 1; stride <= 4; ++stride) {
        for (int pad = 0; pad < kernel; ++pad) {
          if (size + 2 * pad < kernel) continue;
          const int64_t out = (size + 2 * pad - kernel) / stride + 1;
          for (int64_t h = 0; h < size; ++h) {
            int64_t first, last;
            CoveringOutputs(h, stride, pad, kernel, out, &first, &last);
            for (int64_t i = 0; i < out; ++i) {
              int64_t lo, hi;
              PoolWindow(i, stride, pad, kernel, size, &lo, &hi);
              const bool covers = lo <= h && h < hi;
              ASSERT_EQ(covers, first <= i && i <= last)
                  << "size " << size << " kernel " << kernel << " stride " << stride << " pad "
                  << pad << " h " << h << " i " << i;
              ASSERT_EQ(lo, std::max<int64_t>(0, i * stride - pad));
              ASSERT_EQ(hi, std::min<int64_t>(size, i * stride - pad + kernel));
            }
          }
        }
      }
    }
  }
}

TEST(CudaMathTest, DivModMatchesIntegerDivision) {
  Rng rng(14);
  for (int32_t d : {1, 2, 3, 7, 56, 112, 224, 1000, 4097, 65536, 46341}) {
    const double inv = 1.0 / d;
    std::vector<int32_t> values = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, INT_MAX, INT_MAX - 1};
    for (int k = 0; k < 20000; ++k) values.push_back(static_cast<int32_t>(rng.Below(1u << 31)));
    for (int32_t m = 1; m < 50000 && int64_t{m} * d < INT_MAX; m += 7) {
      values.push_back(m * d), values.push_back(m * d - 1);
    }
    for (int32_t a : values) {
      if (a < 0) continue;
      int32_t q, r;
      DivMod(a, d, inv, &q, &r);
      ASSERT_EQ(q, a / d) << a << " / " << d;
      ASSERT_EQ(r, a % d) << a << " % " << d;
    }
  }
}

// Max-pool backward as the CUDA kernels compute it: the envelopes of the argmax, the output
// ranges of every input row and column, and the gather in raster order. It must equal the
// CPU op bit for bit, and its ranges must lie within the windows' (no wasted reads).
TEST(CudaMathTest, MaxPoolGatherEqualsCpuScatter) {
  Rng rng(15);
  for (const PoolCase& cs : PoolCases()) {
    // Values rounded to a few levels make ties, which the tie rule must keep consistent.
    for (bool ties : {false, true}) {
      Tensor x = RandomTensor(cs.x, &rng);
      if (ties) {
        float* p = x.data<float>();
        for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::round(p[i] * 2);
      }
      const Shape ys = PoolOutputShape(cs.x, cs.p);
      Tensor y = Tensor::Empty(ys, DType::kF32), argmax = Tensor::Empty(ys, DType::kI32);
      cpu::MaxPoolForward(x, cs.p, &y, &argmax);
      Tensor dy = RandomTensor(ys, &rng), dx = Tensor::Empty(cs.x, DType::kF32);
      cpu::MaxPoolBackward(dy, argmax, &dx);

      const int64_t N = cs.x[0], H = cs.x[1], W = cs.x[2], C = cs.x[3], OH = ys[1], OW = ys[2];
      std::vector<int32_t> h_lo(OH, INT_MAX), h_hi(OH, INT_MIN);
      std::vector<int32_t> w_lo(OW, INT_MAX), w_hi(OW, INT_MIN);
      const int32_t* a = argmax.data<int32_t>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < OH; ++i)
          for (int64_t j = 0; j < OW; ++j)
            for (int64_t c = 0; c < C; ++c) {
              int32_t row, col;
              const int32_t flat = a[((n * OH + i) * OW + j) * C + c];
              DivMod(flat, static_cast<int32_t>(W), 1.0 / W, &row, &col);
              h_lo[i] = std::min(h_lo[i], row), h_hi[i] = std::max(h_hi[i], row);
              w_lo[j] = std::min(w_lo[j], col), w_hi[j] = std::max(w_hi[j], col);
            }
      std::vector<float> got(dx.numel());
      for (int32_t h = 0; h < H; ++h) {
        int32_t i0, i1;
        EnvelopeRange(h, h_lo.data(), h_hi.data(), static_cast<int32_t>(OH), &i0, &i1);
        int64_t g0, g1;
        CoveringOutputs(h, cs.p.stride_h, cs.p.pad_h, cs.p.kernel_h, OH, &g0, &g1);
        if (i0 <= i1) {
          EXPECT_TRUE(g0 <= i0 && i1 <= g1) << "rows of h " << h;
        }
        for (int32_t w = 0; w < W; ++w) {
          int32_t j0, j1;
          EnvelopeRange(w, w_lo.data(), w_hi.data(), static_cast<int32_t>(OW), &j0, &j1);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c) {
              float sum = 0.0f;
              for (int32_t i = i0; i <= i1; ++i)
                for (int32_t j = j0; j <= j1; ++j) {
                  const int64_t o = ((n * OH + i) * OW + j) * C + c;
                  if (a[o] == h * W + w) sum += dy.data<float>()[o];
                }
              got[((n * H + h) * W + w) * C + c] = sum;
            }
        }
      }
      EXPECT_EQ(0, std::memcmp(got.data(), dx.data<float>(), sizeof(float) * got.size()))
          << ShapeString(cs.x) << (ties ? " with ties" : "");
    }
  }
}

TEST(CudaMathTest, AvgPoolGatherMatchesCpuScatter) {
  Rng rng(16);
  for (const PoolCase& cs : PoolCases()) {
    const Shape ys = PoolOutputShape(cs.x, cs.p);
    Tensor dy = RandomTensor(ys, &rng), dx = Tensor::Empty(cs.x, DType::kF32);
    cpu::AvgPoolBackward(dy, cs.p, &dx);
    const int64_t N = cs.x[0], H = cs.x[1], W = cs.x[2], C = cs.x[3], OH = ys[1], OW = ys[2];
    std::vector<double> want(dx.numel());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          int64_t i0, i1, j0, j1;
          CoveringOutputs(h, cs.p.stride_h, cs.p.pad_h, cs.p.kernel_h, OH, &i0, &i1);
          CoveringOutputs(w, cs.p.stride_w, cs.p.pad_w, cs.p.kernel_w, OW, &j0, &j1);
          for (int64_t c = 0; c < C; ++c) {
            float sum = 0.0f;
            for (int64_t i = i0; i <= i1; ++i)
              for (int64_t j = j0; j <= j1; ++j) {
                int64_t h0, h1, w0, w1;
                PoolWindow(i, cs.p.stride_h, cs.p.pad_h, cs.p.kernel_h, H, &h0, &h1);
                PoolWindow(j, cs.p.stride_w, cs.p.pad_w, cs.p.kernel_w, W, &w0, &w1);
                const float inv = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
                sum += dy.data<float>()[((n * OH + i) * OW + j) * C + c] * inv;
              }
            want[((n * H + h) * W + w) * C + c] = sum;
          }
        }
    ExpectAllNear("avg dx " + ShapeString(cs.x), dx, want, 1e-6, 1e-6);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace tally
