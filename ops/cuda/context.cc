// Device discovery, the per-device contexts, and the error reports of ops/cuda/check.h.
#include "ops/cuda/context.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include <glog/logging.h>

#include "ops/cuda/capture.h"
#include "ops/cuda/runtime.h"
#include "ops/device.h"

namespace tally {
namespace cuda {
namespace {

// Contexts live for the whole process and are never destroyed: ops may run from static
// destructors' tensors, and destroying a stream while the driver shuts down is an error.
struct Contexts {
  std::mutex mu;
  std::vector<DeviceContext*> by_index;  // GUARDED_BY(mu); null until first use
};

Contexts& AllContexts() {
  static Contexts* contexts = new Contexts();
  return *contexts;
}

DeviceContext* CreateContext(int index) {
  auto* ctx = new DeviceContext();
  ctx->index = index;
  ctx->library_mu = new std::mutex();
  TALLY_CUDA_CHECK(cudaSetDevice(index));
  // Non-blocking: the legacy default stream, which some libraries use, must not serialise
  // against Tally's work.
  TALLY_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
  TALLY_CUDA_CHECK(cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, index));
  TALLY_CUDNN_CHECK(cudnnCreate(&ctx->cudnn));
  TALLY_CUDNN_CHECK(cudnnSetStream(ctx->cudnn, ctx->stream));
  TALLY_CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
  return ctx;
}

int CurrentDeviceOrMinusOne() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return d;
}

}  // namespace

void FailCall(const char* library, const char* error, const char* detail, const char* expr,
              const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << library << " error " << (error ? error : "?");
  const int device = CurrentDeviceOrMinusOne();
  if (device >= 0) os << " on cuda:" << device;
  const std::string label = NodeLabel();
  if (!label.empty()) os << " (" << label << ")";
  os << " in `" << expr << "`";
  if (detail != nullptr && *detail != '\0') os << ": " << detail;
  // Inside DeviceGraph::Capture's body a failure (most often a call that a graph cannot
  // hold) ends the capture rather than the process: Capture returns the message as a Status.
  if (CaptureBodyScope::Active()) throw CaptureError(os.str());
  LOG(FATAL) << os.str();
  abort();  // LOG(FATAL) does not return; this tells the compiler so.
}

void FailCudnn(cudnnStatus_t s, const char* expr, const char* file, int line) {
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  FailCall("cuDNN", cudnnGetErrorString(s), detail, expr, file, line);
}

int DeviceCount() {
  static const int count = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      // No driver or no device: a CPU machine, not an error.
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

std::string Describe(int index) {
  cudaDeviceProp prop;
  TALLY_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  std::ostringstream os;
  os.precision(3);
  os << prop.name << ", sm_" << prop.major << prop.minor << ", "
     << static_cast<double>(prop.totalGlobalMem) / (1 << 30) << " GiB";
  return os.str();
}

const DeviceContext& Context(const Device& device) {
  CHECK(!device.is_cpu()) << "a CUDA context for " << device.ToString();
  const int index = device.index;
  DeviceContext* ctx;
  {
    Contexts& all = AllContexts();
    std::lock_guard<std::mutex> lock(all.mu);
    if (all.by_index.empty()) {
      all.by_index.resize(DeviceCount(), nullptr);
    }
    CHECK(index >= 0 && index < static_cast<int>(all.by_index.size()))
        << device.ToString() << ": this process sees " << all.by_index.size() << " CUDA devices";
    if (all.by_index[index] == nullptr) all.by_index[index] = CreateContext(index);
    ctx = all.by_index[index];
  }
  // Every time, not cached per thread: a library (NCCL, cuDNN) may have switched the
  // thread's device since, and the call is cheap.
  TALLY_CUDA_CHECK(cudaSetDevice(index));
  return *ctx;
}

std::vector<cudaStream_t> ActiveStreams() {
  Contexts& all = AllContexts();
  std::lock_guard<std::mutex> lock(all.mu);
  std::vector<cudaStream_t> streams;
  for (DeviceContext* ctx : all.by_index) {
    if (ctx != nullptr) streams.push_back(ctx->stream);
  }
  return streams;
}

void Synchronize(int index) {
  const DeviceContext& ctx = Context(Device{Device::Kind::kCuda, index});
  TALLY_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

Tensor Workspace(const Device& device, size_t bytes) {
  return Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kU8, device);
}

int GridFor(const DeviceContext& ctx, int64_t n, int threads) {
  // Enough blocks for every SM to hold several; a grid-stride loop covers the rest.
  const int64_t wanted = (n + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(ctx.sm_count) * 8;
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, cap)));
}

}  // namespace cuda
}  // namespace tally
