// Fully connected layer with Eigen's GEMM on row-major maps of our buffers (no copies).
// Eigen parallelises its GEMM with OpenMP when built with it, as tally_ops is.
#include <Eigen/Core>

#include "ops/cpu/parallel.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace tally {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const Matrix>;
using RowVector = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVector = Eigen::Map<const Eigen::RowVectorXf>;

ConstMap View(const Tensor& t) { return ConstMap(t.data<float>(), t.dim(0), t.dim(1)); }
Eigen::Map<Matrix> View(Tensor* t) {
  return Eigen::Map<Matrix>(t->data<float>(), t->dim(0), t->dim(1));
}

void Check2d(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  CHECK(t.dtype() == DType::kF32 && t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols)
      << op << ": " << name << " " << t.ToString() << " should be float32 [" << rows << ","
      << cols << "]";
}

}  // namespace

void cpu::LinearForward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor* y) {
  CHECK(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1))
      << "LinearForward: x " << ShapeString(x.shape()) << " and w " << ShapeString(w.shape())
      << " disagree on inputs";
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  Check2d("LinearForward", "x", x, n, in);
  Check2d("LinearForward", "w", w, out, in);
  Check2d("LinearForward", "y", *y, n, out);
  cpu::ApplyNumThreads();
  auto ym = View(y);
  ym.noalias() = View(x) * View(w).transpose();
  if (b != nullptr) {
    CHECK(b->dtype() == DType::kF32 && b->shape() == Shape({out}))
        << "LinearForward: b " << b->ToString() << " should be float32 [" << out << "]";
    ym.rowwise() += ConstRowVector(b->data<float>(), out);
  }
}

void cpu::LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                    Tensor* db) {
  CHECK(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1))
      << "LinearBackward: x " << ShapeString(x.shape()) << " and w " << ShapeString(w.shape())
      << " disagree on inputs";
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  Check2d("LinearBackward", "x", x, n, in);
  Check2d("LinearBackward", "w", w, out, in);
  Check2d("LinearBackward", "dy", dy, n, out);
  CHECK(dw != nullptr) << "LinearBackward: dw is required";
  Check2d("LinearBackward", "dw", *dw, out, in);
  cpu::ApplyNumThreads();
  View(dw).noalias() = View(dy).transpose() * View(x);
  if (dx != nullptr) {
    Check2d("LinearBackward", "dx", *dx, n, in);
    View(dx).noalias() = View(dy) * View(w);
  }
  if (db != nullptr) {
    CHECK(db->dtype() == DType::kF32 && db->shape() == Shape({out}))
        << "LinearBackward: db " << db->ToString() << " should be float32 [" << out << "]";
    RowVector(db->data<float>(), out) = View(dy).colwise().sum();
  }
}

}  // namespace tally
