// The CUDA batch norm (ops/cuda/batch_norm.cu), plain and fused with the residual add and
// ReLU, against the CPU op in fp32, fp16 and bf16: the CPU computes in fp32 on the same
// inputs rounded to the GPU's dtype, and the tolerances are cuda_compare.h's. The GPU side
// goes through the public ops (ops/ops.h), which dispatch on the tensors' device, so that
// this file also links in a build without CUDA (where every test reports itself skipped).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/backends.h"
#include "ops/ops.h"
#include "tests/ops/cuda_compare.h"

namespace tally {
namespace {

using testing::ExpectClose;
using testing::Gpu;
using testing::RandomTensor;
using testing::Rounded;
using testing::ToDevice;
using testing::ToHostF32;

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// ResNet-50's shapes at small batch, and odd ones: channels not a multiple of the vector
// width (the scalar path), [N, C], a single row, many rows of few channels.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {2, 56, 56, 64}, {2, 28, 28, 256}, {4, 7, 7, 2048}, {3, 5, 7, 12}, {2, 9, 9, 3},
      {37, 19},        {1, 1, 1, 24},    {16, 64, 64, 8}, {64, 1000},
  };
  return shapes;
}

// Per-channel tensors are fp32 whatever the activations' dtype, and come from fp32 sums of
// the same inputs: they are held to the fp32 tolerance.
void ExpectChannelsClose(const std::string& what, const Tensor& got, const Tensor& want) {
  ExpectClose(what, got, want, DType::kF32);
}

Tensor GpuF32(const Tensor& host) { return ToDevice(host, DType::kF32); }

// Garbage, so that an element the op fails to write shows.
Tensor GpuFilled(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, Gpu());
  t.Fill(7.0f);
  return t;
}

std::string Name(const char* what, const Shape& s, DType t, bool add = false, bool relu = false) {
  return std::string(what) + " " + ShapeString(s) + " " + DTypeName(t) + (add ? " +z" : "") +
         (relu ? " relu" : "");
}

TEST(CudaBatchNormTest, ForwardTrainingMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(1);
  BatchNormParams p;
  p.eps = 1e-3f;
  p.momentum = 0.8f;
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool add = variant & 1, relu = variant & 2;
        const int64_t C = shape.back();
        // An offset mean exercises the shifted statistics.
        Tensor x = Rounded(RandomTensor(shape, &rng, -1.0f, 3.0f), dt);
        Tensor z = Rounded(RandomTensor(shape, &rng), dt);
        Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f), beta = RandomTensor({C}, &rng);
        Tensor rm = RandomTensor({C}, &rng), rv = RandomTensor({C}, &rng, 0.5f, 1.5f);
        Tensor rm_g = GpuF32(rm), rv_g = GpuF32(rv);
        Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({C}, DType::kF32);
        Tensor inv_std = Tensor::Empty({C}, DType::kF32);
        cpu::BatchNormAddReluForwardTraining(x, add ? &z : nullptr, gamma, beta, p, relu, &rm, &rv,
                                             &y, &mean, &inv_std);
        Tensor xg = ToDevice(x, dt), zg = ToDevice(z, dt), y_g = GpuFilled(shape, dt);
        Tensor mean_g = GpuFilled({C}, DType::kF32), inv_std_g = GpuFilled({C}, DType::kF32);
        if (add || relu) {
          BatchNormAddReluForwardTraining(xg, add ? &zg : nullptr, GpuF32(gamma), GpuF32(beta), p,
                                          relu, &rm_g, &rv_g, &y_g, &mean_g, &inv_std_g);
        } else {
          BatchNormForwardTraining(xg, GpuF32(gamma), GpuF32(beta), p, &rm_g, &rv_g, &y_g, &mean_g,
                                   &inv_std_g);
        }
        ExpectClose(Name("y", shape, dt, add, relu), y_g, y, dt);
        ExpectChannelsClose(Name("save_mean", shape, dt), mean_g, mean);
        ExpectChannelsClose(Name("save_inv_std", shape, dt), inv_std_g, inv_std);
        ExpectChannelsClose(Name("running_mean", shape, dt), rm_g, rm);
        ExpectChannelsClose(Name("running_var", shape, dt), rv_g, rv);
      }
    }
  }
}

TEST(CudaBatchNormTest, ForwardInferenceMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(2);
  BatchNormParams p;
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool add = variant & 1, relu = variant & 2;
        const int64_t C = shape.back();
        Tensor x = Rounded(RandomTensor(shape, &rng), dt);
        Tensor z = Rounded(RandomTensor(shape, &rng), dt);
        Tensor gamma = RandomTensor({C}, &rng), beta = RandomTensor({C}, &rng);
        Tensor rm = RandomTensor({C}, &rng), rv = RandomTensor({C}, &rng, 0.1f, 2.0f);
        Tensor y = Tensor::Empty(shape, DType::kF32);
        cpu::BatchNormAddReluForwardInference(x, add ? &z : nullptr, gamma, beta, rm, rv, p, relu,
                                              &y);
        Tensor zg = ToDevice(z, dt), y_g = GpuFilled(shape, dt);
        if (add || relu) {
          BatchNormAddReluForwardInference(ToDevice(x, dt), add ? &zg : nullptr, GpuF32(gamma),
                                           GpuF32(beta), GpuF32(rm), GpuF32(rv), p, relu, &y_g);
        } else {
          BatchNormForwardInference(ToDevice(x, dt), GpuF32(gamma), GpuF32(beta), GpuF32(rm),
                                    GpuF32(rv), p, &y_g);
        }
        ExpectClose(Name("y", shape, dt, add, relu), y_g, y, dt);
      }
    }
  }
}

// The backward passes take y (for the ReLU mask), save_mean and save_inv_std as inputs: both
// backends get the same ones, from the CPU forward, so that only the backward is compared.
TEST(CudaBatchNormTest, BackwardMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(3);
  BatchNormParams p;
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      const int64_t C = shape.back();
      Tensor x = Rounded(RandomTensor(shape, &rng, -1.0f, 3.0f), dt);
      Tensor z = Rounded(RandomTensor(shape, &rng), dt);
      Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f), beta = RandomTensor({C}, &rng);
      Tensor rm = RandomTensor({C}, &rng), rv = RandomTensor({C}, &rng, 0.5f, 1.5f);
      Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({C}, DType::kF32);
      Tensor inv_std = Tensor::Empty({C}, DType::kF32);
      cpu::BatchNormAddReluForwardTraining(x, &z, gamma, beta, p, /*relu=*/true, &rm, &rv, &y,
                                           &mean, &inv_std);
      y = Rounded(y, dt);
      const Tensor dy = Rounded(RandomTensor(shape, &rng), dt);
      const Tensor xg = ToDevice(x, dt), yg = ToDevice(y, dt), dyg = ToDevice(dy, dt);
      const Tensor gamma_g = GpuF32(gamma), mean_g = GpuF32(mean), inv_std_g = GpuF32(inv_std);
      for (int variant = 0; variant < 4; ++variant) {
        const bool want_dz = variant & 1, relu = variant & 2;
        Tensor dx = Tensor::Empty(shape, DType::kF32), dz = Tensor::Empty(shape, DType::kF32);
        Tensor dgamma = Tensor::Empty({C}, DType::kF32), dbeta = Tensor::Empty({C}, DType::kF32);
        cpu::BatchNormAddReluBackward(x, y, dy, gamma, mean, inv_std, relu, &dx,
                                      want_dz ? &dz : nullptr, &dgamma, &dbeta);
        Tensor dx_g = GpuFilled(shape, dt), dz_g = GpuFilled(shape, dt);
        Tensor dgamma_g = GpuFilled({C}, DType::kF32), dbeta_g = GpuFilled({C}, DType::kF32);
        if (want_dz || relu) {
          BatchNormAddReluBackward(xg, yg, dyg, gamma_g, mean_g, inv_std_g, relu, &dx_g,
                                   want_dz ? &dz_g : nullptr, &dgamma_g, &dbeta_g);
        } else {
          BatchNormBackward(xg, dyg, gamma_g, mean_g, inv_std_g, &dx_g, &dgamma_g, &dbeta_g);
        }
        ExpectClose(Name("dx", shape, dt, want_dz, relu), dx_g, dx, dt);
        ExpectChannelsClose(Name("dgamma", shape, dt, want_dz, relu), dgamma_g, dgamma);
        ExpectChannelsClose(Name("dbeta", shape, dt, want_dz, relu), dbeta_g, dbeta);
        if (want_dz) {  // dy, masked: no arithmetic, so exact
          EXPECT_EQ(testing::RelativeError(dz_g, dz), 0.0) << Name("dz", shape, dt, true, relu);
        }
      }
    }
  }
}

TEST(CudaBatchNormTest, BackwardInferenceMatchesCpu) {
  TALLY_REQUIRE_GPU();
  Rng rng(4);
  BatchNormParams p;
  for (DType dt : kDTypes) {
    for (const Shape& shape : Shapes()) {
      const int64_t C = shape.back();
      Tensor x = Rounded(RandomTensor(shape, &rng), dt);
      Tensor dy = Rounded(RandomTensor(shape, &rng), dt);
      Tensor gamma = RandomTensor({C}, &rng, 0.5f, 1.5f);
      Tensor rm = RandomTensor({C}, &rng), rv = RandomTensor({C}, &rng, 0.2f, 2.0f);
      Tensor dx = Tensor::Empty(shape, DType::kF32), dgamma = Tensor::Empty({C}, DType::kF32);
      Tensor dbeta = Tensor::Empty({C}, DType::kF32);
      cpu::BatchNormBackwardInference(x, dy, gamma, rm, rv, p, &dx, &dgamma, &dbeta);
      Tensor dx_g = GpuFilled(shape, dt), dgamma_g = GpuFilled({C}, DType::kF32);
      Tensor dbeta_g = GpuFilled({C}, DType::kF32);
      BatchNormBackwardInference(ToDevice(x, dt), ToDevice(dy, dt), GpuF32(gamma), GpuF32(rm),
                                 GpuF32(rv), p, &dx_g, &dgamma_g, &dbeta_g);
      ExpectClose(Name("dx", shape, dt), dx_g, dx, dt);
      ExpectChannelsClose(Name("dgamma", shape, dt), dgamma_g, dgamma);
      ExpectChannelsClose(Name("dbeta", shape, dt), dbeta_g, dbeta);
    }
  }
}

// A large mean and a small spread, as tests/ops/batch_norm_test.cc holds the CPU op to.
TEST(CudaBatchNormTest, VarianceSurvivesLargeMean) {
  TALLY_REQUIRE_GPU();
  Rng rng(5);
  const Shape shape{8, 32, 32, 8};
  Tensor x = RandomTensor(shape, &rng, 1000.0f, 1000.01f);
  Tensor gamma = testing::Filled({8}, 1.0f), beta = testing::Filled({8}, 0.0f);
  Tensor rm = testing::Filled({8}, 0.0f), rv = testing::Filled({8}, 1.0f);
  BatchNormParams p;
  p.eps = 0.0f;
  Tensor y = Tensor::Empty(shape, DType::kF32), mean = Tensor::Empty({8}, DType::kF32);
  Tensor inv_std = Tensor::Empty({8}, DType::kF32);
  Tensor rm_g = GpuF32(rm), rv_g = GpuF32(rv), y_g = GpuFilled(shape, DType::kF32);
  Tensor mean_g = GpuFilled({8}, DType::kF32), inv_std_g = GpuFilled({8}, DType::kF32);
  cpu::BatchNormForwardTraining(x, gamma, beta, p, &rm, &rv, &y, &mean, &inv_std);
  BatchNormForwardTraining(GpuF32(x), GpuF32(gamma), GpuF32(beta), p, &rm_g, &rv_g, &y_g, &mean_g,
                           &inv_std_g);
  ExpectChannelsClose("save_inv_std", inv_std_g, inv_std);
  ExpectChannelsClose("running_var", rv_g, rv);
}

// No float atomics: the same inputs give the same bits, run after run.
TEST(CudaBatchNormTest, Deterministic) {
  TALLY_REQUIRE_GPU();
  Rng rng(6);
  const Shape shape{8, 56, 56, 64};
  const DType dt = DType::kF16;
  BatchNormParams p;
  const Tensor x = ToDevice(RandomTensor(shape, &rng), dt);
  const Tensor dy = ToDevice(RandomTensor(shape, &rng), dt);
  const Tensor gamma = GpuF32(RandomTensor({64}, &rng)), beta = GpuF32(RandomTensor({64}, &rng));
  std::vector<Tensor> runs[2];
  for (auto& out : runs) {
    Tensor rm = GpuF32(testing::Filled({64}, 0.0f)), rv = GpuF32(testing::Filled({64}, 1.0f));
    Tensor y = GpuFilled(shape, dt), mean = GpuFilled({64}, DType::kF32);
    Tensor inv_std = GpuFilled({64}, DType::kF32), dx = GpuFilled(shape, dt);
    Tensor dgamma = GpuFilled({64}, DType::kF32), dbeta = GpuFilled({64}, DType::kF32);
    BatchNormForwardTraining(x, gamma, beta, p, &rm, &rv, &y, &mean, &inv_std);
    BatchNormBackward(x, dy, gamma, mean, inv_std, &dx, &dgamma, &dbeta);
    for (const Tensor* t : {&y, &mean, &inv_std, &rv, &dx, &dgamma, &dbeta}) {
      out.push_back(ToHostF32(*t));
    }
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(0, std::memcmp(runs[0][i].raw_data(), runs[1][i].raw_data(), runs[0][i].nbytes()))
        << "output " << i << " differs between two runs";
  }
}

TEST(CudaBatchNormDeathTest, ChannelMismatchNamesOpAndShapes) {
  TALLY_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        Tensor x = Tensor::Zeros({2, 2, 2, 3}, DType::kF16, Gpu());
        Tensor y = Tensor::Zeros({2, 2, 2, 3}, DType::kF16, Gpu());
        Tensor c3 = Tensor::Zeros({3}, DType::kF32, Gpu());
        Tensor c4 = Tensor::Zeros({4}, DType::kF32, Gpu());
        BatchNormForwardInference(x, c4, c3, c3, c3, {}, &y);
      },
      "BatchNormForwardInference: per-channel tensor float32\\[4\\].* does not match x "
      "\\[2,2,2,3\\]");
}

}  // namespace
}  // namespace tally
