// Work that keeps the device busy from a stream of its own, for measuring whether the input
// path decodes beside a training step or waits for it (data/gpu/decode_overlap.cc).
//
//   BusyDevice busy(/*device=*/0);
//   busy.Kernels(1.0);        // 1 s of short kernels filling every SM, queued on busy's stream
//   ... the work measured ...
//   double held = busy.Wait();   // seconds the kernels ran, timed on the device
//   busy.HostFunction(2.0);   // a host function holding the stream for 2 s
//   busy.Wait();
#pragma once

#include <cuda_runtime_api.h>

namespace tally {

class BusyDevice {
 public:
  explicit BusyDevice(int device);
  ~BusyDevice();
  BusyDevice(const BusyDevice&) = delete;
  BusyDevice& operator=(const BusyDevice&) = delete;

  // Queues about `seconds` of kernels whose blocks fill every SM (as many as fit) and each
  // spin 0.1 ms, so that work of a higher-priority stream waits at most that for room, as
  // beside a training step's kernels; at the default priority.
  void Kernels(double seconds);
  // Queues a host function that sleeps `seconds`.
  void HostFunction(double seconds);
  // Waits for what was queued; returns the seconds between its start and end on the device.
  double Wait();

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
  double host_seconds_ = 0;
};

}  // namespace tally
