// Convolutions on the GPU: cuDNN's graph API (ops/cuda/conv_plan.cc) on NHWC activations
// and KRSC weights, in fp32, fp16 or bf16 with fp32 accumulation.
//
// Each call checks its tensors, looks up the cached plan for its pass, shapes, dtype,
// parameters, TF32 setting, device and pointer alignment (building it on the first call),
// takes the plan's workspace from the caching allocator and queues the plan on the device's
// stream. After the first step nothing here allocates device memory or builds anything.
#include <cstdint>
#include <memory>
#include <string>

#include "ops/backends.h"
#include "ops/cuda/context.h"
#include "ops/cuda/conv2d.h"
#include "ops/cuda/conv_plan.h"
#include "ops/device.h"

namespace tally {
namespace cuda {
namespace {

void CheckOperand(const char* op, const char* name, const Tensor& t, DType dtype,
                  const Device& device) {
  CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16)
      << op << ": " << name << " " << t.ToString() << " is not float32, float16 or bfloat16";
  CHECK(t.dtype() == dtype) << op << ": " << name << " " << t.ToString() << " is not "
                            << DTypeName(dtype) << " like the op's other tensors";
  CHECK(!t.device().is_cpu()) << op << ": " << name << " " << t.ToString()
                              << " is not on a CUDA device";
  CHECK(t.device() == device) << op << ": " << name << " " << t.ToString() << " is not on "
                              << device.ToString() << " with the op's other tensors";
}

// The largest power of two, up to 16, that divides the address: a view into a batch (Slice)
// may start at any element.
int Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  int alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

ConvPlanKey MakeKey(ConvPass pass, const Shape& x, const Shape& w, const Shape& y,
                    const ConvParams& p, DType dtype, const Device& device) {
  ConvPlanKey key;
  key.pass = pass;
  key.dtype = dtype;
  key.n = x[0], key.h = x[1], key.w = x[2], key.c = x[3];
  key.k = w[0], key.r = w[1], key.s = w[2];
  key.oh = y[1], key.ow = y[2];
  key.stride_h = p.stride_h, key.stride_w = p.stride_w;
  key.pad_h = p.pad_h, key.pad_w = p.pad_w;
  // Only fp32 can run on TF32; a 16-bit call's plan does not depend on the switch.
  key.tf32 = dtype == DType::kF32 && AllowTf32();
  key.deterministic = Deterministic();
  key.device = device.index;
  return key;
}

// Runs `pass` with its three tensors in their forward roles: x (or dx), w (or dw), y (or dy).
void Run(ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  const Device device = x.device();
  const DeviceContext& ctx = Context(device);
  ConvPlanKey key = MakeKey(pass, x.shape(), w.shape(), y.shape(), p, x.dtype(), device);
  key.align_x = Alignment(x.raw_data());
  key.align_w = Alignment(w.raw_data());
  key.align_y = Alignment(y.raw_data());
  const std::shared_ptr<const ConvPlan> plan = GetConvPlan(key, ctx);
  const size_t bytes = ConvPlanWorkspaceBytes(*plan);
  // Freed when this returns: later work on the stream runs after the convolution.
  const Tensor workspace = bytes > 0 ? Workspace(device, bytes) : Tensor();
  ExecuteConvPlan(*plan, ctx, x.raw_data(), w.raw_data(), y.raw_data(),
                  bytes > 0 ? workspace.raw_data() : nullptr);
}

}  // namespace

void Conv2dForward(const Tensor& x, const Tensor& w, const ConvParams& p, Tensor* y) {
  const char* op = "Conv2dForward";
  CheckOperand(op, "x", x, x.dtype(), x.device());
  CheckOperand(op, "w", w, x.dtype(), x.device());
  CheckOperand(op, "y", *y, x.dtype(), x.device());
  const Shape want = Conv2dOutputShape(x.shape(), w.shape(), p);
  CHECK(y->shape() == want) << op << ": y " << ShapeString(y->shape()) << " for x "
                            << ShapeString(x.shape()) << " and w " << ShapeString(w.shape())
                            << " should be " << ShapeString(want);
  if (y->numel() == 0) return;  // an empty batch; cuDNN refuses zero-sized dims
  Run(ConvPass::kForward, x, w, *y, p);
}

void Conv2dBackwardData(const Tensor& dy, const Tensor& w, const ConvParams& p, Tensor* dx) {
  const char* op = "Conv2dBackwardData";
  CheckOperand(op, "dy", dy, dy.dtype(), dy.device());
  CheckOperand(op, "w", w, dy.dtype(), dy.device());
  CheckOperand(op, "dx", *dx, dy.dtype(), dy.device());
  CHECK(dx->ndim() == 4 && w.ndim() == 4 && dx->dim(3) == w.dim(3))
      << op << ": dx " << ShapeString(dx->shape()) << " and w " << ShapeString(w.shape())
      << " disagree on channels";
  const Shape want = Conv2dOutputShape(dx->shape(), w.shape(), p);
  CHECK(dy.shape() == want) << op << ": dy " << ShapeString(dy.shape()) << " does not match dx "
                            << ShapeString(dx->shape()) << " and w " << ShapeString(w.shape())
                            << " (expected " << ShapeString(want) << ")";
  if (dx->numel() == 0) return;
  Run(ConvPass::kBackwardData, *dx, w, dy, p);
}

void Conv2dBackwardFilter(const Tensor& x, const Tensor& dy, const ConvParams& p, Tensor* dw) {
  const char* op = "Conv2dBackwardFilter";
  CheckOperand(op, "x", x, x.dtype(), x.device());
  CheckOperand(op, "dy", dy, x.dtype(), x.device());
  CheckOperand(op, "dw", *dw, x.dtype(), x.device());
  CHECK(x.ndim() == 4 && dw->ndim() == 4 && x.dim(3) == dw->dim(3))
      << op << ": x " << ShapeString(x.shape()) << " and dw " << ShapeString(dw->shape())
      << " disagree on channels";
  const Shape want = Conv2dOutputShape(x.shape(), dw->shape(), p);
  CHECK(dy.shape() == want) << op << ": dy " << ShapeString(dy.shape()) << " does not match x "
                            << ShapeString(x.shape()) << " and dw " << ShapeString(dw->shape())
                            << " (expected " << ShapeString(want) << ")";
  if (dw->numel() == 0) return;
  if (x.numel() == 0) {
    dw->SetZero();  // the gradient of an empty batch; backward ops overwrite
    return;
  }
  Run(ConvPass::kBackwardFilter, x, *dw, dy, p);
}

std::string Conv2dEngineName(ConvPass pass, const Shape& x, const Shape& w, const ConvParams& p,
                             DType dtype, const Device& device) {
  CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16)
      << "Conv2dEngineName: no cuDNN convolution for " << DTypeName(dtype);
  CHECK(!device.is_cpu()) << "Conv2dEngineName: " << device.ToString() << " is not a CUDA device";
  const Shape y = Conv2dOutputShape(x, w, p);
  const ConvPlanKey key = MakeKey(pass, x, w, y, p, dtype, device);
  return ConvPlanEngineName(*GetConvPlan(key, Context(device)));
}

}  // namespace cuda
}  // namespace tally
