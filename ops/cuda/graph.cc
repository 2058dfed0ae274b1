// DeviceGraph's CUDA side (ops/graph.h): one stream capture per device, begun before the body
// runs and ended after it, each into its own graph, instantiated with its device current.
//
// Relaxed capture mode: the allocator may cudaMalloc a fresh block for the pool while the
// stream is captured, which the stricter modes forbid. During the body the allocator serves
// each captured device from the graph's pool (ops/cuda/capture.h), and a failing CUDA call
// throws CaptureError instead of ending the process. Whatever happens, every capture begun
// is ended before Capture returns, and a broken one discarded, so the streams are usable.
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/capture.h"
#include "ops/cuda/context.h"
#include "ops/cuda/runtime.h"

namespace tally {

class DeviceGraph::Impl {
 public:
  struct OnDevice {
    Device device;
    cudaGraphExec_t exec = nullptr;
    int64_t nodes = 0;
    std::shared_ptr<cuda::GraphPool> pool;
  };
  std::vector<OnDevice> devices;  // in the order Capture was given them
};

namespace cuda {
namespace {

thread_local int t_capture_bodies = 0;

std::string CudaError(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string Names(const std::vector<Device>& devices) {
  std::string names;
  for (const Device& d : devices) names += (names.empty() ? "" : ", ") + d.ToString();
  return names;
}

// One device's capture while it is under way.
struct Capturing {
  Device device;
  cudaStream_t stream = nullptr;
  std::shared_ptr<GraphPool> pool;
  bool stream_capturing = false;
  cudaGraph_t graph = nullptr;
};

// Ends every capture begun, keeping the graphs, and every pool capture. Returns the
// captures that failed, each as "cuda:N (CUDA's error)"; their graphs are null.
std::vector<std::string> EndCaptures(std::vector<Capturing>* captures) {
  std::vector<std::string> broken;
  for (Capturing& c : *captures) {
    if (!c.stream_capturing) continue;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(c.stream, &status);
    const cudaError_t end = cudaStreamEndCapture(c.stream, &c.graph);
    c.stream_capturing = false;
    cudaGetLastError();  // the failure is reported here, not by the next call that checks
    if (e == cudaSuccess) e = end;
    if (e == cudaSuccess && (status != cudaStreamCaptureStatusActive || c.graph == nullptr)) {
      e = cudaErrorStreamCaptureInvalidated;
    }
    if (e != cudaSuccess) broken.push_back(c.device.ToString() + " (" + CudaError(e) + ")");
  }
  for (Capturing& c : *captures) {
    if (c.pool != nullptr) EndPoolCapture(c.device.index);
  }
  return broken;
}

void DestroyGraphs(std::vector<Capturing>* captures) {
  for (Capturing& c : *captures) {
    if (c.graph != nullptr) cudaGraphDestroy(c.graph);
    c.graph = nullptr;
  }
}

}  // namespace

CaptureBodyScope::CaptureBodyScope() { ++t_capture_bodies; }
CaptureBodyScope::~CaptureBodyScope() { --t_capture_bodies; }
bool CaptureBodyScope::Active() { return t_capture_bodies > 0; }

Status CaptureGraph(const std::vector<Device>& devices, const std::function<void()>& body,
                    DeviceGraph::Impl** out) {
  *out = nullptr;
  std::vector<Capturing> captures;
  std::string failure;
  for (const Device& d : devices) {
    Capturing c;
    c.device = d;
    c.stream = Context(d).stream;
    c.pool = BeginPoolCapture(d.index);
    if (c.pool == nullptr) {
      failure = d.ToString() + ": it is being captured already";
      break;
    }
    const cudaError_t e = cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeRelaxed);
    c.stream_capturing = e == cudaSuccess;
    captures.push_back(std::move(c));
    if (e != cudaSuccess) {
      cudaGetLastError();
      failure = d.ToString() + ": cudaStreamBeginCapture failed (" + CudaError(e) + ")";
      break;
    }
  }

  std::string body_failure;
  if (failure.empty()) {
    try {
      CaptureBodyScope scope;
      body();
    } catch (const CaptureError& e) {
      body_failure = e.what();
    } catch (...) {
      EndCaptures(&captures);
      DestroyGraphs(&captures);
      throw;
    }
  }
  std::string broken;
  for (const std::string& b : EndCaptures(&captures)) broken += (broken.empty() ? "" : ", ") + b;
  if (failure.empty() && !body_failure.empty()) {
    failure = "the body did what a CUDA graph cannot hold: " + body_failure;
    if (!broken.empty()) failure += "; captures broken: " + broken;
  } else if (failure.empty() && !broken.empty()) {
    failure = "ending the capture failed: " + broken;
  }
  if (!failure.empty()) {
    DestroyGraphs(&captures);
    return Status::InvalidArgument("DeviceGraph::Capture of " + Names(devices) + ": " + failure);
  }

  auto graph = std::make_unique<DeviceGraph::Impl>();
  for (Capturing& c : captures) {
    DeviceGraph::Impl::OnDevice on;
    on.device = c.device;
    on.pool = std::move(c.pool);
    size_t nodes = 0;
    TALLY_CUDA_CHECK(cudaGraphGetNodes(c.graph, nullptr, &nodes));
    on.nodes = static_cast<int64_t>(nodes);
    Context(c.device);  // instantiate with the graph's device current
    const cudaError_t e = cudaGraphInstantiate(&on.exec, c.graph, 0);
    if (e != cudaSuccess) {
      cudaGetLastError();
      DestroyGraphs(&captures);
      DestroyGraph(graph.release());
      return Status::Internal("DeviceGraph::Capture: " + c.device.ToString() +
                              ": cudaGraphInstantiate failed (" + CudaError(e) + ")");
    }
    graph->devices.push_back(std::move(on));
  }
  DestroyGraphs(&captures);  // the executable graphs do not need them
  *out = graph.release();
  return Status::Ok();
}

void LaunchGraph(DeviceGraph::Impl* graph) {
  for (const DeviceGraph::Impl::OnDevice& on : graph->devices) {
    TALLY_CUDA_CHECK(cudaGraphLaunch(on.exec, Context(on.device).stream));
  }
}

int64_t GraphNodeCount(const DeviceGraph::Impl& graph) {
  int64_t nodes = 0;
  for (const DeviceGraph::Impl::OnDevice& on : graph.devices) nodes += on.nodes;
  return nodes;
}

// A launch still in flight finishes first: the driver frees the executable graph after it.
// Errors are ignored, since this may run while the process exits and the driver is gone;
// the pools go when their last tensor does.
void DestroyGraph(DeviceGraph::Impl* graph) {
  if (graph == nullptr) return;
  for (const DeviceGraph::Impl::OnDevice& on : graph->devices) {
    if (on.exec != nullptr && cudaGraphExecDestroy(on.exec) != cudaSuccess) cudaGetLastError();
  }
  delete graph;
}

}  // namespace cuda
}  // namespace tally
