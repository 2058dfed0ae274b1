// SGD and NAG on the GPU, plain (fp32 weights) and multi-precision (fp16/bf16 weights with
// an fp32 master), for one tensor or for a whole model in one kernel launch.
//
// Every element goes through SgdUpdateOne (ops/sgd_rule.h), the function the CPU loops call,
// so both apply the same operations in the same order. (Bit equality would also need both
// compilers to fuse the same multiply-adds into FMAs; they may not, so results can differ in
// the last bit.) A 16-bit weight is its master rounded to nearest even (__float2half_rn,
// __float2bfloat16_rn), as FloatToHalf and FloatToBFloat16 do on the CPU.
//
// One kernel serves all three ops. Its only parameter is a table of the tensors to update
// (pointers, sizes, lr_mult and wd, the kind of slot), passed by value as a __grid_constant__
// struct: kernel parameters may take up to 32764 bytes (CUDA 12.1+, sm_70+), room for
// kMaxSlots tensors, read in place from parameter memory rather than copied per thread. The
// blocks share the work by chunks of elements (ops/cuda/multi_tensor.cuh). A model with more
// than kMaxSlots tensors takes one launch per full table.
//
// The step's scalars may come from device memory (SgdStepScalars): the table carries their
// pointers and every block reads them itself, so a step whose learning rate, loss scale or
// overflow flag was computed on the GPU is queued without the host reading any of them (and
// can be captured in a CUDA graph). A skipped step (found nonzero) costs one launch whose
// blocks return at once.
#include <algorithm>
#include <memory>
#include <ostream>
#include <vector>

#include "ops/backends.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/cuda/dtype.cuh"
#include "ops/cuda/multi_tensor.cuh"
#include "ops/ops.h"
#include "ops/scalar_tensor.h"
#include "ops/sgd_rule.h"

namespace tally {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// The dtypes of a slot's weight and gradient; the 16-bit weights have an fp32 master.
enum class SlotKind : uint8_t { kF32, kF16, kF16F32Grad, kBF16, kBF16F32Grad };

// Structure of arrays, so that a tensor's fields cost no padding.
template <int kCapacity>
struct SgdTable {
  SgdParams params;  // lr, momentum, rescale_grad, clip_gradient, nesterov; wd per tensor
  // Device scalars (SgdStepScalars), null when not given: fp32 lr and grad_scale, int32 found.
  const float* step_lr;
  const float* step_grad_scale;
  const int32_t* found;
  int num_tensors;
  void* weight[kCapacity];
  const void* grad[kCapacity];
  float* master[kCapacity];  // null for fp32 weights
  float* mom[kCapacity];     // null without momentum state
  int64_t size[kCapacity];
  int64_t chunk_begin[kCapacity + 1];
  float lr_mult[kCapacity];
  float wd[kCapacity];
  SlotKind kind[kCapacity];
};

constexpr int kMaxSlots = 512;
static_assert(sizeof(SgdTable<kMaxSlots>) <= 32764,
              "the table must fit in a kernel's parameters (32764 bytes)");

__device__ void UpdateF32(const SgdParams& p, const float* grad, float* weight, float* mom,
                          int64_t begin, int64_t end) {
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float w = weight[i];
    if (mom != nullptr) {
      float m = mom[i];
      SgdUpdateOne(p, grad[i], &w, &m);
      mom[i] = m;
    } else {
      SgdUpdateOne(p, grad[i], &w, nullptr);
    }
    weight[i] = w;
  }
}

template <typename W, typename G>
__device__ void UpdateMaster(const SgdParams& p, const G* grad, W* weight, float* master,
                             float* mom, int64_t begin, int64_t end) {
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float w = master[i];
    if (mom != nullptr) {
      float m = mom[i];
      SgdUpdateOne(p, Load(grad[i]), &w, &m);
      mom[i] = m;
    } else {
      SgdUpdateOne(p, Load(grad[i]), &w, nullptr);
    }
    master[i] = w;
    Store(&weight[i], w);
  }
}

template <int kCapacity>
__global__ void __launch_bounds__(kThreads)
    SgdKernel(const __grid_constant__ SgdTable<kCapacity> table) {
  if (table.found != nullptr && *table.found != 0) return;  // a skipped step
  const SgdParams step = WithStepScalars(table.params, table.step_lr, table.step_grad_scale);
  const int64_t chunks = table.chunk_begin[table.num_tensors];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const ChunkSpan span = MapChunk(table.chunk_begin, table.size, table.num_tensors, c);
    const int t = span.tensor;
    SgdParams p = step;
    // The same fp32 product as the CPU's MultiSgdUpdate, so lr agrees to the bit.
    p.lr = step.lr * table.lr_mult[t];
    p.wd = table.wd[t];
    float* master = table.master[t];
    float* mom = table.mom[t];
    const void* g = table.grad[t];
    void* w = table.weight[t];
    switch (table.kind[t]) {
      case SlotKind::kF32:
        UpdateF32(p, static_cast<const float*>(g), static_cast<float*>(w), mom, span.begin, span.end);
        break;
      case SlotKind::kF16:
        UpdateMaster(p, static_cast<const __half*>(g), static_cast<__half*>(w), master, mom,
                     span.begin, span.end);
        break;
      case SlotKind::kF16F32Grad:
        UpdateMaster(p, static_cast<const float*>(g), static_cast<__half*>(w), master, mom,
                     span.begin, span.end);
        break;
      case SlotKind::kBF16:
        UpdateMaster(p, static_cast<const __nv_bfloat16*>(g), static_cast<__nv_bfloat16*>(w),
                     master, mom, span.begin, span.end);
        break;
      case SlotKind::kBF16F32Grad:
        UpdateMaster(p, static_cast<const float*>(g), static_cast<__nv_bfloat16*>(w), master,
                     mom, span.begin, span.end);
        break;
    }
  }
}

// Names the op in messages, and the slot of MultiSgdUpdate ("MultiSgdUpdate: slot 3").
struct OpName {
  const char* op;
  int64_t slot;  // -1: a single-tensor op
};
std::ostream& operator<<(std::ostream& os, const OpName& name) {
  os << name.op;
  if (name.slot >= 0) os << ": slot " << name.slot;
  return os;
}

float* CheckedMomentum(const OpName& op, const SgdParams& p, const Tensor* mom, int64_t n) {
  if (mom == nullptr || !mom->defined()) {
    CHECK(p.momentum == 0.0f) << op << ": momentum " << p.momentum << " needs a mom tensor";
    return nullptr;
  }
  CHECK(mom->dtype() == DType::kF32 && mom->numel() == n)
      << op << ": mom " << mom->ToString() << " must be float32 with " << n << " elements";
  return static_cast<float*>(mom->raw_data());
}

// Checks a slot as the CPU ops do (master null or undefined: SgdUpdate's rules, else
// SgdMultiPrecisionUpdate's) and appends it. REQUIRES: the table has room.
template <int kCapacity>
void AddSlot(const OpName& op, const SgdParams& p, float lr_mult, float wd, const Tensor& grad,
             const Tensor& weight, const Tensor* master, const Tensor* mom,
             SgdTable<kCapacity>* table) {
  const int64_t n = weight.numel();
  const int i = table->num_tensors;
  if (master == nullptr || !master->defined()) {
    CHECK(weight.dtype() == DType::kF32 && grad.dtype() == DType::kF32 && grad.numel() == n)
        << op << ": weight " << weight.ToString() << " and grad " << grad.ToString()
        << " must be float32 of equal size";
    table->kind[i] = SlotKind::kF32;
    table->master[i] = nullptr;
  } else {
    const DType t = weight.dtype();
    CHECK(t == DType::kF16 || t == DType::kBF16)
        << op << ": weight " << weight.ToString() << " must be float16 or bfloat16";
    CHECK(grad.dtype() == t || grad.dtype() == DType::kF32)
        << op << ": grad " << grad.ToString() << " must be " << DTypeName(t) << " or float32";
    CHECK(master->dtype() == DType::kF32)
        << op << ": master " << master->ToString() << " must be float32";
    CHECK(grad.numel() == n && master->numel() == n)
        << op << ": weight " << weight.ToString() << ", grad " << grad.ToString()
        << " and master " << master->ToString() << " differ in size";
    const bool f32_grad = grad.dtype() == DType::kF32;
    table->kind[i] = t == DType::kF16 ? (f32_grad ? SlotKind::kF16F32Grad : SlotKind::kF16)
                                      : (f32_grad ? SlotKind::kBF16F32Grad : SlotKind::kBF16);
    table->master[i] = static_cast<float*>(master->raw_data());
  }
  table->mom[i] = CheckedMomentum(op, p, mom, n);
  if (n == 0) return;  // checked, nothing to update
  table->weight[i] = weight.raw_data();
  table->grad[i] = grad.raw_data();
  table->size[i] = n;
  table->lr_mult[i] = lr_mult;
  table->wd[i] = wd;
  table->num_tensors = i + 1;
}

// Queues the table's updates, if it has any. `table` is finished here (its chunk_begin).
template <int kCapacity>
void Launch(const Device& device, SgdTable<kCapacity>* table) {
  if (table->num_tensors == 0) return;
  const int64_t chunks = FillChunkBegin(table->size, table->num_tensors, table->chunk_begin);
  if (chunks == 0) return;
  const DeviceContext& ctx = Context(device);
  // Blocks beyond the chunks would idle; a grid-stride loop covers counts past the cap.
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(chunks, int64_t{1} << 30));
  SgdKernel<kCapacity><<<grid, kThreads, 0, ctx.stream>>>(*table);
  TALLY_LAUNCH_CHECK();
}

template <typename T>
const T* PtrOrNull(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}

template <int kCapacity>
std::unique_ptr<SgdTable<kCapacity>> NewTable(const SgdParams& p,
                                              const SgdStepScalars& scalars = {}) {
  auto table = std::make_unique<SgdTable<kCapacity>>();  // value-initialised: zeros
  table->params = p;
  table->step_lr = PtrOrNull<float>(scalars.lr);
  table->step_grad_scale = PtrOrNull<float>(scalars.grad_scale);
  table->found = PtrOrNull<int32_t>(scalars.found);
  return table;
}

}  // namespace

void SgdUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight, Tensor* mom) {
  auto table = NewTable<1>(p);
  AddSlot(OpName{"SgdUpdate", -1}, p, 1.0f, p.wd, grad, *weight, nullptr, mom, table.get());
  Launch(weight->device(), table.get());
}

void SgdMultiPrecisionUpdate(const SgdParams& p, const Tensor& grad, Tensor* weight,
                             Tensor* master, Tensor* mom) {
  CHECK(master != nullptr && master->defined())
      << "SgdMultiPrecisionUpdate: master weights are required";
  auto table = NewTable<1>(p);
  AddSlot(OpName{"SgdMultiPrecisionUpdate", -1}, p, 1.0f, p.wd, grad, *weight, master, mom,
          table.get());
  Launch(weight->device(), table.get());
}

void MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots) {
  cuda::MultiSgdUpdate(p, slots, SgdStepScalars{});
}

void MultiSgdUpdate(const SgdParams& p, const std::vector<SgdSlot>& slots,
                    const SgdStepScalars& scalars) {
  CheckSgdStepScalars("MultiSgdUpdate", scalars);
  if (slots.empty()) return;
  const Device device = slots[0].weight.device();
  auto table = NewTable<kMaxSlots>(p, scalars);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (table->num_tensors == kMaxSlots) {
      Launch(device, table.get());
      table = NewTable<kMaxSlots>(p, scalars);
    }
    const SgdSlot& s = slots[i];
    // A slot without mom steps without momentum whatever p.momentum says (ops/ops.h), so
    // it is checked as the CPU checks it, with momentum 0; the kernel never reads momentum
    // for a slot without mom.
    SgdParams slot_params = p;
    if (!s.mom.defined()) slot_params.momentum = 0.0f;
    // wd * wd_mult is the CPU's fp32 product; lr * lr_mult is taken in the kernel, since lr
    // may come from the device.
    AddSlot(OpName{"MultiSgdUpdate", static_cast<int64_t>(i)}, slot_params, s.lr_mult,
            p.wd * s.wd_mult, s.grad, s.weight, &s.master, &s.mom, table.get());
  }
  Launch(device, table.get());
}

}  // namespace cuda
}  // namespace tally
