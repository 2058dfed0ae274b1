// NcclComms: one NCCL communicator per GPU of this process, made together and destroyed
// together, and the one collective the GPU kvstore needs, an in-place sum.
//
//   std::unique_ptr<NcclComms> comms;
//   TALLY_RETURN_IF_ERROR(NcclComms::Create({cuda0, cuda1}, &comms));
//   comms->AllReduceSum({{grad_a0, grad_a1}, {grad_b0, grad_b1}});  // one NCCL group
//
// Rank i of the communicators is devices[i]. Every collective is queued on each device's
// one stream (ops/device.h, Context(device).stream), after the work already queued there,
// and returns before the GPUs have run it, like every other op on a device.
//
// Errors: creating the communicators fails with a Status (the machine may lack the links or
// the memory NCCL needs, which is the outside world's doing); a failed call afterwards is
// fatal through TALLY_NCCL_CHECK, whose message names the source line, the call, NCCL's error
// name and text, the device the thread was using and this process (SetNodeLabel), e.g.
//   kvstore/nccl_comm.cc:88: NCCL error ncclUnhandledCudaError on cuda:1 (worker 0 on host-a)
//   in `ncclGroupEnd()`: unhandled cuda error (...)
//
// Thread-safety: none; NCCL needs every call of one group from one thread, and the kvstore
// that owns the communicators is driven by one thread.
#pragma once

#include <nccl.h>

#include <memory>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

// "ncclInvalidUsage" for ncclInvalidUsage; "ncclResult_t(<n>)" for a value this header does
// not know.
const char* NcclResultName(ncclResult_t r);

[[noreturn]] void FailNccl(ncclResult_t r, const char* expr, const char* file, int line);
inline void CheckNccl(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r != ncclSuccess) FailNccl(r, expr, file, line);
}

class NcclComms {
 public:
  // REQUIRES: devices are distinct cuda devices that exist (CheckDevice), at least two.
  static Status Create(const std::vector<Device>& devices, std::unique_ptr<NcclComms>* out);
  // Waits for every device's stream, then finalizes and destroys the communicators.
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  const std::vector<Device>& devices() const { return devices_; }

  // Sums each set of buffers across the devices, in place: once each device's stream has run
  // it, every buffers[k][d] holds the sum over all d' of buffers[k][d'], the same bits on
  // every device. All sets go in one NCCL group (one launch per device for the lot, rather
  // than one per set).
  // REQUIRES: buffers[k] has one tensor per device, buffers[k][d] on devices()[d]; the
  // tensors of one set have equal element counts and one dtype, fp32, fp16 or bf16.
  void AllReduceSum(const std::vector<std::vector<Tensor>>& buffers);

 private:
  NcclComms(std::vector<Device> devices, std::vector<ncclComm_t> comms);

  const std::vector<Device> devices_;
  std::vector<ncclComm_t> comms_;  // comms_[i] is rank i, on devices_[i]
};

}  // namespace tally

#define TALLY_NCCL_CHECK(expr) ::tally::CheckNccl((expr), #expr, __FILE__, __LINE__)
