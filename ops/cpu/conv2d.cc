// Convolutions with oneDNN's direct algorithm (Winograd trades accuracy for speed).
//
// Activations stay plain NHWC, which oneDNN's jit kernels read directly. Weights are handed
// over as format `any` so that the kernel picks its own blocked layout, and are reordered
// from/to our plain [K, R, S, C] (oneDNN's `ohwi`) on every call: that costs one pass over
// the weights, small next to the convolution, and keeps every other op seeing plain weights.
//
// Creating a primitive means jit-compiling a kernel (milliseconds), so primitives are made
// once per (pass, shapes, params) and cached. Their scratchpads are user-managed, one
// growing buffer per calling thread, so that a cached primitive can run on several threads
// at once without sharing scratch memory.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>

#include "ops/cpu/conv2d_impl.h"
#include "ops/cpu/parallel.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace tally {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using cpu::ConvPass;

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A CPU stream is only a handle on the engine; one per thread avoids sharing it.
dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

// 64-byte aligned memory that grows to the largest request and is kept for reuse.
class GrowingBuffer {
 public:
  ~GrowingBuffer() { std::free(data_); }
  void* Get(size_t bytes) {
    if (bytes > capacity_ || data_ == nullptr) {
      std::free(data_);
      capacity_ = std::max<size_t>((bytes + 63) / 64 * 64, 64);
      data_ = std::aligned_alloc(64, capacity_);
      CHECK(data_ != nullptr) << "conv2d: out of memory for " << capacity_ << " bytes";
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

thread_local GrowingBuffer scratch_buffer;
thread_local GrowingBuffer weight_buffer;

struct ConvKey {
  ConvPass pass;
  int64_t n, h, w, c, k, r, s;
  int sh, sw, ph, pw;
  bool operator<(const ConvKey& o) const {
    return std::tie(pass, n, h, w, c, k, r, s, sh, sw, ph, pw) <
           std::tie(o.pass, o.n, o.h, o.w, o.c, o.k, o.r, o.s, o.sh, o.sw, o.ph, o.pw);
  }
};

// One cached convolution: the primitive, the layouts it runs on, and the reorder between
// its weight layout and ours (from ours for forward and backward-data, to ours for
// backward-filter).
struct ConvPlan {
  dnnl::primitive conv;
  memory::desc x_md, y_md;   // NHWC input and output activations (or their gradients)
  memory::desc plain_w_md;   // [K, R, S, C]
  memory::desc conv_w_md;    // the layout the kernel chose
  memory::desc scratch_md;
  bool reorder_weights = false;
  dnnl::reorder weight_reorder;
  std::string impl;
};

std::shared_ptr<ConvPlan> MakePlan(const ConvKey& key) {
  const int64_t oh = (key.h + 2 * key.ph - key.r) / key.sh + 1;
  const int64_t ow = (key.w + 2 * key.pw - key.s) / key.sw + 1;
  auto plan = std::make_shared<ConvPlan>();
  plan->x_md = memory::desc({key.n, key.c, key.h, key.w}, memory::data_type::f32, Tag::nhwc);
  plan->y_md = memory::desc({key.n, key.k, oh, ow}, memory::data_type::f32, Tag::nhwc);
  const memory::dims wdims = {key.k, key.c, key.r, key.s};
  plan->plain_w_md = memory::desc(wdims, memory::data_type::f32, Tag::ohwi);
  const memory::desc any_w(wdims, memory::data_type::f32, Tag::any);
  // oneDNN checks out = (in + pad_l + pad_r - kernel) / stride + 1 with floor division, so
  // symmetric padding matches our output shape even when the last row of taps is unused.
  const memory::dims strides = {key.sh, key.sw}, pad = {key.ph, key.pw};
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  Engine();

  try {
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, plan->x_md,
                                        any_w, plan->y_md, strides, pad, pad),
        attr, Engine());
    memory::desc w_md;
    if (key.pass == ConvPass::kForward) {
      w_md = fwd.weights_desc();
      plan->scratch_md = fwd.scratchpad_desc();
      plan->impl = fwd.impl_info_str();
      plan->conv = dnnl::convolution_forward(fwd);
    } else if (key.pass == ConvPass::kBackwardData) {
      dnnl::convolution_backward_data::primitive_desc bwd(
          dnnl::convolution_backward_data::desc(algo, plan->x_md, any_w, plan->y_md, strides,
                                                pad, pad),
          attr, Engine(), fwd);
      w_md = bwd.weights_desc();
      plan->scratch_md = bwd.scratchpad_desc();
      plan->impl = bwd.impl_info_str();
      plan->conv = dnnl::convolution_backward_data(bwd);
    } else {
      dnnl::convolution_backward_weights::primitive_desc bwd(
          dnnl::convolution_backward_weights::desc(algo, plan->x_md, any_w, plan->y_md, strides,
                                                   pad, pad),
          attr, Engine(), fwd);
      w_md = bwd.diff_weights_desc();
      plan->scratch_md = bwd.scratchpad_desc();
      plan->impl = bwd.impl_info_str();
      plan->conv = dnnl::convolution_backward_weights(bwd);
    }
    plan->conv_w_md = w_md;
    plan->reorder_weights = w_md != plan->plain_w_md;
    if (plan->reorder_weights) {
      const bool to_plain = key.pass == ConvPass::kBackwardFilter;
      plan->weight_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(
          Engine(), to_plain ? w_md : plan->plain_w_md, Engine(),
          to_plain ? plan->plain_w_md : w_md));
    }
  } catch (const dnnl::error& e) {
    LOG(FATAL) << "conv2d: oneDNN refused the convolution x [" << key.n << "," << key.h << ","
               << key.w << "," << key.c << "] w [" << key.k << "," << key.r << "," << key.s
               << "," << key.c << "] stride " << key.sh << "x" << key.sw << " pad " << key.ph
               << "x" << key.pw << ": " << e.what();
  }
  return plan;
}

std::shared_ptr<ConvPlan> GetPlan(ConvPass pass, const Shape& x, const Shape& w,
                                  const ConvParams& p) {
  static std::mutex mu;
  static std::map<ConvKey, std::shared_ptr<ConvPlan>>* cache =  // GUARDED_BY(mu)
      new std::map<ConvKey, std::shared_ptr<ConvPlan>>();
  const ConvKey key{pass, x[0], x[1], x[2], x[3], w[0], w[1], w[2],
                    p.stride_h, p.stride_w, p.pad_h, p.pad_w};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, MakePlan(key)).first;
  return it->second;
}

// Runs `plan` with the activations at x and y (their gradients for the backward passes)
// and the plain weights at `w`.
void Execute(const ConvPlan& plan, ConvPass pass, void* x, void* y, void* w) {
  cpu::ApplyNumThreads();
  dnnl::engine& eng = Engine();
  dnnl::stream& stream = Stream();
  memory x_mem(plan.x_md, eng, x), y_mem(plan.y_md, eng, y);
  memory plain_w(plan.plain_w_md, eng, w);
  memory conv_w = plain_w;
  if (plan.reorder_weights) {
    conv_w = memory(plan.conv_w_md, eng, weight_buffer.Get(plan.conv_w_md.get_size()));
  }
  memory scratch(plan.scratch_md, eng, scratch_buffer.Get(plan.scratch_md.get_size()));
  if (pass == ConvPass::kForward) {
    if (plan.reorder_weights) plan.weight_reorder.execute(stream, plain_w, conv_w);
    plan.conv.execute(stream, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, conv_w},
                               {DNNL_ARG_DST, y_mem}, {DNNL_ARG_SCRATCHPAD, scratch}});
  } else if (pass == ConvPass::kBackwardData) {
    if (plan.reorder_weights) plan.weight_reorder.execute(stream, plain_w, conv_w);
    plan.conv.execute(stream, {{DNNL_ARG_DIFF_SRC, x_mem}, {DNNL_ARG_WEIGHTS, conv_w},
                               {DNNL_ARG_DIFF_DST, y_mem}, {DNNL_ARG_SCRATCHPAD, scratch}});
  } else {
    plan.conv.execute(stream, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_DIFF_WEIGHTS, conv_w},
                               {DNNL_ARG_DIFF_DST, y_mem}, {DNNL_ARG_SCRATCHPAD, scratch}});
    if (plan.reorder_weights) plan.weight_reorder.execute(stream, conv_w, plain_w);
  }
  stream.wait();
}

void CheckF32(const char* op, const char* name, const Tensor& t) {
  CHECK(t.dtype() == DType::kF32) << op << ": " << name << " " << t.ToString()
                                  << " is not float32";
}

}  // namespace

Shape Conv2dOutputShape(const Shape& x, const Shape& w, const ConvParams& p) {
  CHECK(x.size() == 4 && w.size() == 4)
      << "Conv2d: x " << ShapeString(x) << " must be [N,H,W,C] and w " << ShapeString(w)
      << " [K,R,S,C]";
  CHECK_EQ(x[3], w[3]) << "Conv2d: x " << ShapeString(x) << " and w " << ShapeString(w)
                       << " disagree on channels";
  CHECK(p.stride_h > 0 && p.stride_w > 0 && p.pad_h >= 0 && p.pad_w >= 0)
      << "Conv2d: bad stride " << p.stride_h << "x" << p.stride_w << " or pad " << p.pad_h
      << "x" << p.pad_w;
  CHECK(x[1] + 2 * p.pad_h >= w[1] && x[2] + 2 * p.pad_w >= w[2])
      << "Conv2d: kernel of w " << ShapeString(w) << " is larger than padded x "
      << ShapeString(x);
  return {x[0], (x[1] + 2 * p.pad_h - w[1]) / p.stride_h + 1,
          (x[2] + 2 * p.pad_w - w[2]) / p.stride_w + 1, w[0]};
}

void cpu::Conv2dForward(const Tensor& x, const Tensor& w, const ConvParams& p, Tensor* y) {
  CheckF32("Conv2dForward", "x", x);
  CheckF32("Conv2dForward", "w", w);
  CheckF32("Conv2dForward", "y", *y);
  const Shape want = Conv2dOutputShape(x.shape(), w.shape(), p);
  CHECK(y->shape() == want) << "Conv2dForward: y " << ShapeString(y->shape()) << " for x "
                            << ShapeString(x.shape()) << " and w " << ShapeString(w.shape())
                            << " should be " << ShapeString(want);
  auto plan = GetPlan(ConvPass::kForward, x.shape(), w.shape(), p);
  Execute(*plan, ConvPass::kForward, x.raw_data(), y->raw_data(), w.raw_data());
}

void cpu::Conv2dBackwardData(const Tensor& dy, const Tensor& w, const ConvParams& p, Tensor* dx) {
  CheckF32("Conv2dBackwardData", "dy", dy);
  CheckF32("Conv2dBackwardData", "w", w);
  CheckF32("Conv2dBackwardData", "dx", *dx);
  CHECK(dx->ndim() == 4 && w.ndim() == 4 && dx->dim(3) == w.dim(3))
      << "Conv2dBackwardData: dx " << ShapeString(dx->shape()) << " and w "
      << ShapeString(w.shape()) << " disagree on channels";
  const Shape want = Conv2dOutputShape(dx->shape(), w.shape(), p);
  CHECK(dy.shape() == want) << "Conv2dBackwardData: dy " << ShapeString(dy.shape())
                            << " does not match dx " << ShapeString(dx->shape()) << " and w "
                            << ShapeString(w.shape()) << " (expected " << ShapeString(want)
                            << ")";
  auto plan = GetPlan(ConvPass::kBackwardData, dx->shape(), w.shape(), p);
  Execute(*plan, ConvPass::kBackwardData, dx->raw_data(), dy.raw_data(), w.raw_data());
}

void cpu::Conv2dBackwardFilter(const Tensor& x, const Tensor& dy, const ConvParams& p, Tensor* dw) {
  CheckF32("Conv2dBackwardFilter", "x", x);
  CheckF32("Conv2dBackwardFilter", "dy", dy);
  CheckF32("Conv2dBackwardFilter", "dw", *dw);
  CHECK(x.ndim() == 4 && dw->ndim() == 4 && x.dim(3) == dw->dim(3))
      << "Conv2dBackwardFilter: x " << ShapeString(x.shape()) << " and dw "
      << ShapeString(dw->shape()) << " disagree on channels";
  const Shape want = Conv2dOutputShape(x.shape(), dw->shape(), p);
  CHECK(dy.shape() == want) << "Conv2dBackwardFilter: dy " << ShapeString(dy.shape())
                            << " does not match x " << ShapeString(x.shape()) << " and dw "
                            << ShapeString(dw->shape()) << " (expected " << ShapeString(want)
                            << ")";
  auto plan = GetPlan(ConvPass::kBackwardFilter, x.shape(), dw->shape(), p);
  Execute(*plan, ConvPass::kBackwardFilter, x.raw_data(), dy.raw_data(), dw->raw_data());
}

namespace cpu {
std::string Conv2dImplementation(const Shape& x, const Shape& w, const ConvParams& p,
                                 ConvPass pass) {
  Conv2dOutputShape(x, w, p);
  return GetPlan(pass, x, w, p)->impl;
}
}  // namespace cpu

}  // namespace tally
