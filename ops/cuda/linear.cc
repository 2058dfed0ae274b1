// Fully connected layers on the GPU: every product is one cublasLtMatmul in fp32, fp16 or
// bf16 with fp32 accumulation; the bias rides in the matmul's epilogue, and so does its
// gradient when cuBLASLt has an algorithm for that.
//
// cuBLASLt is column-major and our tensors are row-major. A row-major [r, c] matrix is, byte
// for byte, the column-major [c, r] matrix (leading dimension c): its transpose. Each op is
// therefore written over transposes, D^T = op(A) op(B), with no copy:
//   forward  y^T [out, N] = T(w^T) x^T           m = out, n = N,   k = in   (A = w, B = x)
//   dx       dx^T [in, N] = w^T dy^T             m = in,  n = N,   k = out  (A = w, B = dy)
//   dw       dw^T [in, out] = x^T T(dy^T)        m = in,  n = out, k = N    (A = x, B = dy)
// The bias adds along D's rows, out in the forward product. BGRADB sums op(B) = dy over the
// k = N rows into a vector along D's columns, out: exactly db, fused into the dw product.
// Where no BGRADB algorithm exists, db is one more product: db [out, 1] = dy^T ones[N, 1].
//
// Algorithm choice: cublasLtMatmulAlgoGetHeuristic once per shape, dtype, transposes,
// epilogue, TF32 switch, pointer alignment and device; the descriptors, layouts and the
// algorithm stay cached for the process's life, so a step makes no heuristic call and no
// allocation beyond the workspace, which comes from the caching allocator.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ops/backends.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/device.h"
#include "ops/ops.h"

namespace tally {
namespace {

using cuda::ContextLock;
using cuda::DeviceContext;

// What cuBLASLt may use for split-K partial sums and the like; 32 MiB is NVIDIA's advice for
// Hopper. The heuristic reports how much its choice needs, and only that much is taken.
constexpr uint64_t kMaxWorkspaceBytes = 32ull << 20;

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// The largest power of two (up to cuBLASLt's default assumption of 256) dividing the
// address. Tensors may be slices at any element offset, and an algorithm chosen for aligned
// pointers may refuse or misread misaligned ones, so the alignment is part of the plan key.
uint32_t AlignmentOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 1;
  while (align < 256 && a % (2 * align) == 0) align *= 2;
  return align;
}

// D [m, n] = op(A) op(B), column-major, A and B stored un-transposed as [m, k] / [k, m] etc.
struct Gemm {
  int64_t m, n, k;
  bool trans_a, trans_b;
};

struct PlanKey {
  int device;
  DType dtype;
  bool tf32;
  int64_t m, n, k;
  bool trans_a, trans_b;
  int epilogue;
  uint32_t align_a, align_b, align_d, align_bias;

  auto Tie() const {
    return std::tie(device, dtype, tf32, m, n, k, trans_a, trans_b, epilogue, align_a, align_b,
                    align_d, align_bias);
  }
  bool operator<(const PlanKey& o) const { return Tie() < o.Tie(); }
};

struct Plan {
  bool usable = false;  // false: cuBLASLt has no algorithm for this key (kept so as not to ask again)
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

// Plans of every device, never freed (like the device contexts). A plan is only ever used by
// its own device's callers, under that device's library_mu, which guards its descriptor's
// bias pointer; plans_mu guards only the map.
std::mutex plans_mu;
std::map<PlanKey, std::unique_ptr<Plan>>& Plans() {
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>();
  return *plans;
}

cublasLtMatrixLayout_t Layout(DType t, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  TALLY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CudaType(t), static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), rows));
  return layout;
}

void SetPreference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   uint32_t value) {
  TALLY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// Builds the descriptors of `key` and asks the heuristic for its best algorithm. `bias` is the
// real bias (or bias gradient) pointer: the heuristic reads its alignment from it.
// REQUIRES: the device's library_mu is held.
std::unique_ptr<Plan> MakePlan(const DeviceContext& ctx, const PlanKey& key, const void* bias) {
  auto plan = std::make_unique<Plan>();
  const cublasComputeType_t compute =
      key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  TALLY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  const int32_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TALLY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &op_a, sizeof(op_a)));
  TALLY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &op_b, sizeof(op_b)));
  const uint32_t epilogue = static_cast<uint32_t>(key.epilogue);
  TALLY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                    &epilogue, sizeof(epilogue)));
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const int32_t bias_type = CudaType(key.dtype);
    TALLY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    TALLY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof(bias)));
  }
  plan->a = key.trans_a ? Layout(key.dtype, key.k, key.m) : Layout(key.dtype, key.m, key.k);
  plan->b = key.trans_b ? Layout(key.dtype, key.n, key.k) : Layout(key.dtype, key.k, key.n);
  plan->d = Layout(key.dtype, key.m, key.n);

  cublasLtMatmulPreference_t pref = nullptr;
  TALLY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = kMaxWorkspaceBytes;
  TALLY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
  SetPreference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      ctx.lt, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &result, &found);
  // NOT_SUPPORTED means "no algorithm for this configuration", an answer rather than a
  // failure: the caller decides whether it can do without (the BGRADB epilogue can).
  if (s != CUBLAS_STATUS_NOT_SUPPORTED) {
    cuda::CheckCublas(s, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__, __LINE__);
  }
  TALLY_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  plan->usable = s == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->usable) {
    plan->algo = result.algo;
    plan->workspace = result.workspaceSize;
  }
  return plan;
}

std::string Describe(const PlanKey& key) {
  std::ostringstream s;
  s << DTypeName(key.dtype) << (key.tf32 ? " (TF32)" : "") << " m=" << key.m << " n=" << key.n
    << " k=" << key.k << " op(A)=" << (key.trans_a ? "T" : "N")
    << " op(B)=" << (key.trans_b ? "T" : "N") << " epilogue " << key.epilogue << " alignments "
    << key.align_a << "/" << key.align_b << "/" << key.align_d << "/" << key.align_bias
    << " on cuda:" << key.device;
  return s.str();
}

// Queues D = op(A) op(B) (plus the epilogue) on the device's stream. With required false, an
// epilogue cuBLASLt has no algorithm for is reported by returning false, nothing queued.
bool RunGemm(const char* op, const Device& device, DType dtype, const Gemm& g,
             cublasLtEpilogue_t epilogue, const void* a, const void* b, void* d,
             const void* bias, bool required) {
  const DeviceContext& ctx = cuda::Context(device);
  PlanKey key{device.index, dtype, dtype == DType::kF32 && AllowTf32(), g.m, g.n, g.k,
              g.trans_a, g.trans_b, static_cast<int>(epilogue), AlignmentOf(a), AlignmentOf(b),
              AlignmentOf(d), bias != nullptr ? AlignmentOf(bias) : 256u};
  ContextLock lock(*ctx.library_mu);
  Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> map_lock(plans_mu);
    auto it = Plans().find(key);
    if (it != Plans().end()) plan = it->second.get();
  }
  if (plan == nullptr) {
    std::unique_ptr<Plan> made = MakePlan(ctx, key, bias);
    plan = made.get();
    std::lock_guard<std::mutex> map_lock(plans_mu);
    Plans().emplace(key, std::move(made));
  }
  if (!plan->usable) {
    CHECK(!required) << op << ": cuBLASLt has no algorithm for " << Describe(key);
    return false;
  }
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    TALLY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof(bias)));
  }
  Tensor workspace;  // lives until the matmul is queued; later work on the stream reuses it
  void* workspace_ptr = nullptr;
  if (plan->workspace > 0) {
    workspace = cuda::Workspace(device, plan->workspace);
    workspace_ptr = workspace.raw_data();
  }
  const float alpha = 1.0f, beta = 0.0f;
  TALLY_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, plan->desc, &alpha, a, plan->a, b, plan->b, &beta, d,
                                    plan->d, d, plan->d, &plan->algo, workspace_ptr,
                                    plan->workspace, ctx.stream));
  return true;
}

// A device vector of at least n ones of dtype t, for the bias gradient as a product when no
// BGRADB algorithm exists. Kept per device and dtype, grown (by the caching allocator) when a
// larger batch comes; filled on the stream, so it is ready for the product queued after it.
// A vector outgrown is kept too, never freed: a CUDA graph recorded with it still reads it.
Tensor Ones(const Device& device, DType t, int64_t n) {
  static std::mutex mu;
  static auto* ones = new std::map<std::pair<int, DType>, Tensor>();
  static auto* outgrown = new std::vector<Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  Tensor& v = (*ones)[{device.index, t}];
  if (!v.defined() || v.numel() < n) {
    if (v.defined()) outgrown->push_back(v);
    v = Tensor::Empty({n}, t, device);
    v.Fill(1.0f);
  }
  return v;
}

void CheckFloat(const char* op, const char* name, const Tensor& t) {
  CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16)
      << op << ": " << name << " " << t.ToString() << " must be float32, float16 or bfloat16";
}

void Check2d(const char* op, const char* name, const Tensor& t, DType dtype, int64_t rows,
             int64_t cols) {
  CHECK(t.dtype() == dtype && t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols)
      << op << ": " << name << " " << t.ToString() << " should be " << DTypeName(dtype) << " ["
      << rows << "," << cols << "]";
}

void CheckVector(const char* op, const char* name, const Tensor& t, DType dtype, int64_t n) {
  CHECK(t.dtype() == dtype && t.shape() == Shape({n}))
      << op << ": " << name << " " << t.ToString() << " should be " << DTypeName(dtype) << " ["
      << n << "]";
}

// The shapes of y = x w^T: x [n, in] and w [out, in] of one float dtype, CHECKed.
struct LinearShape {
  int64_t n, in, out;
  DType dtype;
};
LinearShape CheckLinear(const char* op, const Tensor& x, const Tensor& w) {
  CHECK(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1))
      << op << ": x " << ShapeString(x.shape()) << " and w " << ShapeString(w.shape())
      << " disagree on inputs";
  CheckFloat(op, "x", x);
  LinearShape s{x.dim(0), x.dim(1), w.dim(0), x.dtype()};
  Check2d(op, "w", w, s.dtype, s.out, s.in);
  return s;
}

}  // namespace

void cuda::LinearForward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor* y) {
  const char* op = "LinearForward";
  const auto [n, in, out, t] = CheckLinear(op, x, w);
  Check2d(op, "y", *y, t, n, out);
  if (b != nullptr) CheckVector(op, "b", *b, t, out);
  CHECK(in > 0 && out > 0) << op << ": w " << w.ToString() << " is empty";
  if (n == 0) return;
  RunGemm(op, x.device(), t, Gemm{out, n, in, /*trans_a=*/true, /*trans_b=*/false},
          b != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, w.raw_data(),
          x.raw_data(), y->raw_data(), b != nullptr ? b->raw_data() : nullptr, /*required=*/true);
}

void cuda::LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                          Tensor* dw, Tensor* db) {
  const char* op = "LinearBackward";
  const auto [n, in, out, t] = CheckLinear(op, x, w);
  Check2d(op, "dy", dy, t, n, out);
  CHECK(dw != nullptr) << op << ": dw is required";
  Check2d(op, "dw", *dw, t, out, in);
  if (dx != nullptr) Check2d(op, "dx", *dx, t, n, in);
  if (db != nullptr) CheckVector(op, "db", *db, t, out);
  CHECK(in > 0 && out > 0) << op << ": w " << w.ToString() << " is empty";
  if (n == 0) {  // sums over no rows
    dw->SetZero();
    if (db != nullptr) db->SetZero();
    return;
  }
  const Device device = x.device();
  const Gemm filter{in, out, n, /*trans_a=*/false, /*trans_b=*/true};
  const bool fused = db != nullptr &&
                     RunGemm(op, device, t, filter, CUBLASLT_EPILOGUE_BGRADB, x.raw_data(),
                             dy.raw_data(), dw->raw_data(), db->raw_data(), /*required=*/false);
  if (!fused) {
    RunGemm(op, device, t, filter, CUBLASLT_EPILOGUE_DEFAULT, x.raw_data(), dy.raw_data(),
            dw->raw_data(), nullptr, /*required=*/true);
  }
  if (db != nullptr && !fused) {
    const Tensor ones = Ones(device, t, n);
    RunGemm(op, device, t, Gemm{out, 1, n, /*trans_a=*/false, /*trans_b=*/false},
            CUBLASLT_EPILOGUE_DEFAULT, dy.raw_data(), ones.raw_data(), db->raw_data(), nullptr,
            /*required=*/true);
  }
  if (dx != nullptr) {
    RunGemm(op, device, t, Gemm{in, n, out, /*trans_a=*/false, /*trans_b=*/false},
            CUBLASLT_EPILOGUE_DEFAULT, w.raw_data(), dy.raw_data(), dx->raw_data(), nullptr,
            /*required=*/true);
  }
}

}  // namespace tally
