// Plans of cuDNN's graph API for the convolutions of ops/cuda/conv2d.cc.
//
// The legacy cudnnConvolutionForward family is deprecated in cuDNN 9 and picks from a fixed
// enum of algorithms. The graph API lists the engines cuDNN has for a convolution and says
// what each does to the numbers (numerical notes), which is how the TF32 switch and fp32
// accumulation are enforced here.
//
// A plan is built once per ConvPlanKey: three tensor descriptors, a convolution descriptor,
// one operation, an operation graph, then the engine configs of heuristics mode A (ranked
// by expected speed) and, when none of those is usable, of mode FALLBACK. The first config
// that passes our numerical filter and finalizes into an execution plan is kept. Finalizing
// may compile a kernel (runtime-compiled engines), so a build takes milliseconds to
// seconds: it happens in the first step, never in the steady state.
#include "ops/cuda/conv_plan.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include <glog/logging.h>

// Sets one attribute; a failure names the attribute and this line.
#define TALLY_CUDNN_SET(desc, name, type, count, values) \
  TALLY_CUDNN_CHECK(cudnnBackendSetAttribute((desc).get(), name, type, count, values))

namespace tally {
namespace cuda {
namespace {

// The ids by which the variant pack hands cuDNN the three data pointers.
constexpr int64_t kXUid = 'x', kWUid = 'w', kYUid = 'y';

// Owns one cudnnBackendDescriptor_t. Move-only; empty after a move.
class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type) {
    TALLY_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
  }
  // A failure to destroy is ignored: checking would throw from a destructor while a CUDA
  // graph is recorded (ops/cuda/capture.h), and it leaks one descriptor at worst.
  ~BackendDescriptor() {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
  }
  BackendDescriptor(BackendDescriptor&& o) noexcept : desc_(std::exchange(o.desc_, nullptr)) {}
  BackendDescriptor& operator=(BackendDescriptor&& o) noexcept {
    std::swap(desc_, o.desc_);
    return *this;
  }
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

const char* OpName(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward: return "Conv2dForward";
    case ConvPass::kBackwardData: return "Conv2dBackwardData";
    case ConvPass::kBackwardFilter: return "Conv2dBackwardFilter";
  }
  return "Conv2d";
}

std::string KeyString(const ConvPlanKey& k) {
  std::ostringstream os;
  os << "x [" << k.n << "," << k.h << "," << k.w << "," << k.c << "] w [" << k.k << "," << k.r
     << "," << k.s << "," << k.c << "] y [" << k.n << "," << k.oh << "," << k.ow << "," << k.k
     << "] stride " << k.stride_h << "x" << k.stride_w << " pad " << k.pad_h << "x" << k.pad_w
     << " " << DTypeName(k.dtype)
     << (k.dtype == DType::kF32 ? (k.tf32 ? " TF32 on" : " TF32 off") : "")
     << (k.deterministic ? " deterministic" : "")
     << " on cuda:" << k.device << ", pointers aligned to " << k.align_x << "/" << k.align_w
     << "/" << k.align_y << " bytes";
  return os.str();
}

std::string LastCudnnError() {
  char message[1024] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
}

cudnnDataType_t CudnnType(DType t) {
  switch (t) {
    case DType::kF32: return CUDNN_DATA_FLOAT;
    case DType::kF16: return CUDNN_DATA_HALF;
    case DType::kBF16: return CUDNN_DATA_BFLOAT16;
    default: LOG(FATAL) << "Conv2d: no cuDNN convolution for " << DTypeName(t);
  }
  return CUDNN_DATA_FLOAT;
}

// A row-major [n, h, w, c] tensor (activations NHWC, weights KRSC) in cuDNN's terms: dims
// in NCHW order, strides of the NHWC layout.
BackendDescriptor NhwcTensor(int64_t uid, DType dtype, int64_t n, int64_t h, int64_t w,
                             int64_t c, int alignment) {
  BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = CudnnType(dtype);
  const int64_t dims[4] = {n, c, h, w};
  const int64_t strides[4] = {h * w * c, 1, w * c, c};
  const int64_t byte_alignment = alignment;
  TALLY_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  TALLY_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  TALLY_CUDNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  TALLY_CUDNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  TALLY_CUDNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &byte_alignment);
  TALLY_CUDNN_CHECK(cudnnBackendFinalize(t.get()));
  return t;
}

BackendDescriptor Convolution(const ConvPlanKey& key) {
  BackendDescriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  // fp32 accumulation whatever the data type (ops/ops.h).
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  // What deep learning calls convolution (no kernel flip), as ops/cpu/conv2d.cc computes.
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial_dims = 2;
  // Symmetric padding: like Conv2dOutputShape, cuDNN rounds the output size down, so a last
  // row of taps that does not fit is simply unused.
  const int64_t pads[2] = {key.pad_h, key.pad_w};
  const int64_t strides[2] = {key.stride_h, key.stride_w};
  const int64_t dilations[2] = {1, 1};
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial_dims);
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilations);
  TALLY_CUDNN_SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides);
  TALLY_CUDNN_CHECK(cudnnBackendFinalize(conv.get()));
  return conv;
}

// The operation descriptor of a pass and the attributes naming its parts.
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationAttributes AttributesOf(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvPass::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvPass::kBackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

BackendDescriptor Operation(ConvPass pass, const BackendDescriptor& x, const BackendDescriptor& w,
                            const BackendDescriptor& y, const BackendDescriptor& conv) {
  const OperationAttributes a = AttributesOf(pass);
  BackendDescriptor op(a.type);
  cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  // Scalars in the compute type (float). beta 0: outputs are overwritten, never accumulated
  // into (ops/ops.h), so their old contents, NaN included, do not matter.
  const float alpha = 1.0f, beta = 0.0f;
  TALLY_CUDNN_SET(op, a.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
  TALLY_CUDNN_SET(op, a.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
  TALLY_CUDNN_SET(op, a.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd);
  TALLY_CUDNN_SET(op, a.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
  TALLY_CUDNN_SET(op, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  TALLY_CUDNN_SET(op, a.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  TALLY_CUDNN_CHECK(cudnnBackendFinalize(op.get()));
  return op;
}

// The graph, and below the plan, are told the device through its handle. cuDNN 9's headers
// mark those two attributes deprecated in favour of device-property descriptors, whose point
// is building plans on a machine without the GPU; here the GPU is at hand, and the handle is
// the path cuDNN has supported since the graph API began.
BackendDescriptor OperationGraph(const BackendDescriptor& op, cudnnHandle_t handle) {
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t od = op.get();
  TALLY_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od);
  TALLY_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  TALLY_CUDNN_CHECK(cudnnBackendFinalize(graph.get()));
  return graph;
}

// The engine configs heuristics `mode` proposes for the graph, best first. Empty when the
// mode has nothing for it: a heuristic may refuse a graph it does not cover, which is what
// the next mode is for, so that failure is not fatal here.
std::vector<BackendDescriptor> EngineConfigs(const BackendDescriptor& graph,
                                             cudnnBackendHeurMode_t mode) {
  BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t gd = graph.get();
  TALLY_CUDNN_SET(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                  1, &gd);
  TALLY_CUDNN_SET(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  const cudnnStatus_t status = cudnnBackendFinalize(heuristics.get());
  if (status != CUDNN_STATUS_SUCCESS) {
    VLOG(1) << "Conv2d: heuristics mode " << static_cast<int>(mode) << " refused the graph: "
            << cudnnGetErrorString(status) << " " << LastCudnnError();
    return {};
  }
  int64_t available = 0;
  TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available,
                                             nullptr));
  // cuDNN fills descriptors we create; it does not hand out its own.
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < available; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  if (available > 0) {
    TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, available,
                                               &returned, raw.data()));
  }
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(returned, 0, available)));
  return configs;
}

BackendDescriptor EngineOf(const BackendDescriptor& config) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t ed = engine.get();
  int64_t count = 0;
  TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &ed));
  return engine;
}

std::vector<cudnnBackendNumericalNote_t> NumericalNotes(const BackendDescriptor& engine) {
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                             CUDNN_TYPE_NUMERICAL_NOTE,
                                             CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes));
  count = std::clamp<int64_t>(count, 0, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  return {notes, notes + count};
}

const char* NoteName(cudnnBackendNumericalNote_t note) {
  switch (note) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return "tensor_core";
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return "down_convert_inputs";
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return "reduced_precision_reduction";
    case CUDNN_NUMERICAL_NOTE_FFT: return "fft";
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return "nondeterministic";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD: return "winograd";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: return "winograd_4x4";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: return "winograd_6x6";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return "winograd_13x13";
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: return "strict_nan_prop";
    default: return "unknown_note";
  }
}

// Why an engine with these notes may not run the convolution of `key`, or nullptr if it may.
// Every dtype accumulates in fp32 from the inputs as given (ops/ops.h). fp32 with TF32 off
// promises fp32 arithmetic throughout (ops/device.h), which rules out TF32 tensor cores and
// the transforms whose rounding goes past it (Winograd, FFT; ops/cpu/conv2d.cc avoids
// Winograd for the same reason).
const char* Rejection(const std::vector<cudnnBackendNumericalNote_t>& notes,
                      const ConvPlanKey& key) {
  const bool strict_fp32 = key.dtype == DType::kF32 && !key.tf32;
  for (cudnnBackendNumericalNote_t note : notes) {
    switch (note) {
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        return NoteName(note);
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        if (key.deterministic) return NoteName(note);
        break;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
      case CUDNN_NUMERICAL_NOTE_FFT:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
        if (strict_fp32) return NoteName(note);
        break;
      default:
        break;
    }
  }
  return nullptr;
}

// "eng12 k2=3 k3=0 [tensor_core]": the engine, its knob choices and its numerical notes.
std::string EngineName(const BackendDescriptor& config, const BackendDescriptor& engine,
                       const std::vector<cudnnBackendNumericalNote_t>& notes, bool fallback) {
  std::ostringstream os;
  int64_t index = -1, count = 0;
  TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                             CUDNN_TYPE_INT64, 1, &count, &index));
  os << "eng" << index;
  std::vector<BackendDescriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(knobs.back().get());
  }
  int64_t chosen = 0;
  TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS,
                                             &chosen, raw.data()));
  chosen = std::clamp<int64_t>(chosen, 0, CUDNN_KNOB_TYPE_COUNTS);
  for (int64_t i = 0; i < chosen; ++i) {
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t value = 0;
    TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                               CUDNN_TYPE_KNOB_TYPE, 1, &count, &type));
    TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                               CUDNN_TYPE_INT64, 1, &count, &value));
    os << " k" << static_cast<int>(type) << "=" << value;
  }
  os << " [";
  for (size_t i = 0; i < notes.size(); ++i) os << (i ? "," : "") << NoteName(notes[i]);
  os << "]";
  if (fallback) os << " (fallback)";
  return os.str();
}

}  // namespace

struct ConvPlan {
  // What the plan was made from, kept as long as it: cuDNN does not say that a finalized
  // execution plan is independent of the descriptors it references.
  std::vector<BackendDescriptor> parts;
  BackendDescriptor plan;  // declared last, so destroyed first
  size_t workspace_bytes = 0;
  std::string engine_name;
};

namespace {

std::shared_ptr<ConvPlan> BuildPlan(const ConvPlanKey& key, cudnnHandle_t handle) {
  auto result = std::make_shared<ConvPlan>();
  std::vector<BackendDescriptor>& parts = result->parts;
  parts.push_back(NhwcTensor(kXUid, key.dtype, key.n, key.h, key.w, key.c, key.align_x));
  parts.push_back(NhwcTensor(kWUid, key.dtype, key.k, key.r, key.s, key.c, key.align_w));
  parts.push_back(NhwcTensor(kYUid, key.dtype, key.n, key.oh, key.ow, key.k, key.align_y));
  parts.push_back(Convolution(key));
  parts.push_back(Operation(key.pass, parts[0], parts[1], parts[2], parts[3]));
  parts.push_back(OperationGraph(parts[4], handle));
  const BackendDescriptor& graph = parts.back();

  int tried = 0, rejected = 0;
  cudnnStatus_t last_status = CUDNN_STATUS_SUCCESS;
  std::string last_error;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (BackendDescriptor& config : EngineConfigs(graph, mode)) {
      BackendDescriptor engine = EngineOf(config);
      const std::vector<cudnnBackendNumericalNote_t> notes = NumericalNotes(engine);
      if (const char* why = Rejection(notes, key)) {
        VLOG(2) << OpName(key.pass) << ": skipping an engine config (" << why << ") for "
                << KeyString(key);
        ++rejected;
        continue;
      }
      ++tried;
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendDescriptor_t cd = config.get();
      TALLY_CUDNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
      TALLY_CUDNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      // Expected to fail for some configs (a shape, alignment or shared-memory need that
      // this convolution does not meet): the next one is tried.
      const cudnnStatus_t status = cudnnBackendFinalize(plan.get());
      if (status != CUDNN_STATUS_SUCCESS) {
        last_status = status;
        last_error = LastCudnnError();
        continue;
      }
      int64_t workspace = 0, count = 0;
      TALLY_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(),
                                                 CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &count, &workspace));
      CHECK_GE(workspace, 0) << OpName(key.pass) << ": negative workspace for " << KeyString(key);
      result->engine_name = EngineName(config, engine, notes, mode == CUDNN_HEUR_MODE_FALLBACK);
      result->workspace_bytes = static_cast<size_t>(workspace);
      result->parts.push_back(std::move(config));
      result->parts.push_back(std::move(engine));
      result->plan = std::move(plan);
      VLOG(1) << OpName(key.pass) << ": " << result->engine_name << ", workspace " << workspace
              << " bytes, for " << KeyString(key);
      return result;
    }
  }
  LOG(FATAL) << OpName(key.pass) << ": no cuDNN engine runs " << KeyString(key) << " ("
             << tried << " engine configs failed to finalize, " << rejected
             << " rejected for their numerics"
             << (tried > 0 ? std::string("; last: ") + cudnnGetErrorString(last_status) + " " +
                                 last_error
                           : std::string())
             << ")";
  return nullptr;
}

}  // namespace

bool ConvPlanKey::operator<(const ConvPlanKey& o) const {
  return std::tie(pass, dtype, n, h, w, c, k, r, s, oh, ow, stride_h, stride_w, pad_h, pad_w, tf32,
                  deterministic, device, align_x, align_w, align_y) <
         std::tie(o.pass, o.dtype, o.n, o.h, o.w, o.c, o.k, o.r, o.s, o.oh, o.ow, o.stride_h,
                  o.stride_w, o.pad_h, o.pad_w, o.tf32, o.deterministic, o.device, o.align_x,
                  o.align_w, o.align_y);
}

std::shared_ptr<const ConvPlan> GetConvPlan(const ConvPlanKey& key, const DeviceContext& ctx) {
  static std::mutex mu;
  // Never destroyed: destroying plans after the handle and the driver are gone at exit
  // would fail.
  static auto* plans =  // GUARDED_BY(mu)
      new std::map<ConvPlanKey, std::shared_ptr<const ConvPlan>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans->find(key);
    if (it != plans->end()) return it->second;
  }
  // Built with the device's handle, which one thread at a time may use. Holding it until the
  // plan is in the map also means two threads missing the same key build it once.
  ContextLock handle_lock(*ctx.library_mu);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans->find(key);
    if (it != plans->end()) return it->second;
  }
  std::shared_ptr<const ConvPlan> plan = BuildPlan(key, ctx.cudnn);
  std::lock_guard<std::mutex> lock(mu);
  plans->emplace(key, plan);
  return plan;
}

size_t ConvPlanWorkspaceBytes(const ConvPlan& plan) { return plan.workspace_bytes; }

const std::string& ConvPlanEngineName(const ConvPlan& plan) { return plan.engine_name; }

void ExecuteConvPlan(const ConvPlan& plan, const DeviceContext& ctx, void* x, void* w, void* y,
                     void* workspace) {
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kXUid, kWUid, kYUid};
  void* pointers[3] = {x, w, y};
  TALLY_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  TALLY_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
  TALLY_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  TALLY_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
  ContextLock lock(*ctx.library_mu);
  TALLY_CUDNN_CHECK(cudnnBackendExecute(ctx.cudnn, plan.plan.get(), pack.get()));
}

}  // namespace cuda
}  // namespace tally

#undef TALLY_CUDNN_SET
