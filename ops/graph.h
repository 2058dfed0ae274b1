// DeviceGraph: the work a function queues on some GPUs' streams, recorded once as CUDA graphs
// and replayed with one launch per device.
//
//   std::unique_ptr<DeviceGraph> step;
//   TALLY_RETURN_IF_ERROR(DeviceGraph::Capture({gpu0, gpu1}, [&] { QueueStep(); }, &step));
//   for (int i = 0; i < steps; ++i) {
//     step->Launch();                        // queued; returns at once
//     ...
//   }
//
// What is recorded: every kernel, copy and fill the body queues on the devices' streams
// (ops/device.h), including an NCCL group across them. Nothing runs during Capture; each
// Launch runs it all again, on the same addresses, in the order the body queued it.
//
// Memory. A replay writes where the capture wrote, so that memory must stay the graph's:
// - Device memory allocated while the body runs comes from a private pool kept by the
//   graph, and by any tensor made in the body that outlives it (a tensor from the pool
//   stays valid after Capture and holds what the last replay wrote into it). Blocks of the
//   pool are handed to no other allocation; they go back to the device's cache when the
//   graph and the last such tensor are gone. Blocks the body frees join the pool too.
// - Tensors made before Capture that the body reads or writes are not kept by the graph:
//   the caller keeps them alive as long as the graph may run, and copies new inputs into
//   them before a Launch.
//
// The body must queue only: no wait for a captured device (Synchronize, a copy into host
// memory, a copy between GPUs, reading a loss), no copy from pageable host memory (upload
// from PinnedEmpty tensors), no work on a captured device from another thread, no
// PinnedEmpty tensor freed. Build what an op builds on its first call (cuDNN and cuBLASLt
// plans, NCCL communicators) by running the body once before capturing it.
// When the body does something a graph cannot hold, Capture returns a Status naming the
// device and CUDA's error; the body stops at that call, the broken capture is discarded
// and the devices are usable again.
//
// Thread-safety: Capture may be called from any thread, but only one capture of a device
// at a time. Launch may be called from any thread, one call at a time per graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

class DeviceGraph {
 public:
  // Runs body once while recording everything it queues on the streams of `devices`
  // (cuda devices, distinct; the body may interleave work on several of them) into one
  // CUDA graph per device, and instantiates them. A build without CUDA, a cpu device, a
  // device that does not exist or is being captured already, or a body that does what a
  // graph cannot hold, returns an error and leaves *out null.
  static Status Capture(const std::vector<Device>& devices, const std::function<void()>& body,
                        std::unique_ptr<DeviceGraph>* out);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Queues the recorded work on each device's stream again, in the devices' order; returns
  // without waiting.
  void Launch();
  int64_t num_nodes() const;  // nodes over all the devices' graphs (for tests and logs)

  // The devices' instantiated graphs and memory pools (ops/cuda/graph.cc); opaque here.
  class Impl;

 private:
  explicit DeviceGraph(Impl* impl);
  std::unique_ptr<Impl, void (*)(Impl*)> impl_;
};

}  // namespace tally
