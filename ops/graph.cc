// ops/graph.h: the host-compiler side, which checks the devices. The capture itself is
// ops/cuda/graph.cc, called only in builds with CUDA.
#include "ops/graph.h"

#include "ops/device.h"

#ifdef TALLY_HAVE_CUDA
#include "ops/cuda/runtime.h"
#endif

namespace tally {
namespace {

Status CheckGraphDevices(const std::vector<Device>& devices) {
  if (devices.empty()) return Status::InvalidArgument("DeviceGraph::Capture: no devices given");
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    if (d.is_cpu()) {
      return Status::InvalidArgument(d.ToString() + ": DeviceGraph captures the work of CUDA "
                                     "devices only; cpu ops run when called");
    }
    TALLY_RETURN_IF_ERROR(CheckDevice(d));
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == d) {
        return Status::InvalidArgument(d.ToString() + ": given twice to DeviceGraph::Capture");
      }
    }
  }
  return Status::Ok();
}

void DestroyImpl(DeviceGraph::Impl* impl) {
#ifdef TALLY_HAVE_CUDA
  cuda::DestroyGraph(impl);
#endif
}

}  // namespace

Status DeviceGraph::Capture(const std::vector<Device>& devices, const std::function<void()>& body,
                            std::unique_ptr<DeviceGraph>* out) {
  out->reset();
  TALLY_RETURN_IF_ERROR(CheckGraphDevices(devices));
#ifdef TALLY_HAVE_CUDA
  Impl* impl = nullptr;
  TALLY_RETURN_IF_ERROR(cuda::CaptureGraph(devices, body, &impl));
  out->reset(new DeviceGraph(impl));
  return Status::Ok();
#else
  return Status::Internal("DeviceGraph::Capture: CheckDevice accepted a CUDA device in a build "
                          "without CUDA");
#endif
}

DeviceGraph::DeviceGraph(Impl* impl) : impl_(impl, &DestroyImpl) {}

DeviceGraph::~DeviceGraph() = default;

// Without CUDA no DeviceGraph is ever made, so these have nothing to do there.
void DeviceGraph::Launch() {
#ifdef TALLY_HAVE_CUDA
  cuda::LaunchGraph(impl_.get());
#endif
}

int64_t DeviceGraph::num_nodes() const {
#ifdef TALLY_HAVE_CUDA
  return cuda::GraphNodeCount(*impl_);
#else
  return 0;
#endif
}

}  // namespace tally
