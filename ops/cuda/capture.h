// What DeviceGraph::Capture (ops/cuda/graph.cc) needs from the rest of the CUDA side: the
// allocator's private pools (ops/cuda/allocator.cc), and a way for a failing call in the
// captured body to end the capture instead of the process (FailCall, ops/cuda/context.cc).
//
//   std::shared_ptr<GraphPool> pool = BeginPoolCapture(0);   // cuda:0's allocations -> pool
//   {
//     CaptureBodyScope scope;                                 // failures throw CaptureError
//     body();
//   }
//   EndPoolCapture(0);                                        // the graph keeps `pool`
#pragma once

#include <memory>
#include <stdexcept>

namespace tally {
namespace cuda {

// A captured graph's device memory. Opaque; its owners (the graph, and the Storage of every
// block from it) hold it by shared_ptr, and when the last is gone its blocks go back to the
// device's cache.
class GraphPool;

// From now until EndPoolCapture(index), every allocation on cuda:index is served from the
// returned pool, and every block of cuda:index that is freed joins a pool. Returns null
// when cuda:index is in a pool capture already.
std::shared_ptr<GraphPool> BeginPoolCapture(int index);
void EndPoolCapture(int index);

// Thrown by FailCall (ops/cuda/check.h), in place of the fatal error, on a thread inside a
// CaptureBodyScope: the body cannot go on, but the process and the device can.
class CaptureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Marks the calling thread as running a capture's body while it lives. Scopes nest.
class CaptureBodyScope {
 public:
  CaptureBodyScope();
  ~CaptureBodyScope();
  CaptureBodyScope(const CaptureBodyScope&) = delete;
  CaptureBodyScope& operator=(const CaptureBodyScope&) = delete;
  static bool Active();  // on the calling thread
};

}  // namespace cuda
}  // namespace tally
