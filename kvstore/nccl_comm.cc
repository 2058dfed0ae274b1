#include "kvstore/nccl_comm.h"

#include <mutex>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/device.h"

namespace tally {
namespace {

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    default: break;
  }
  LOG(FATAL) << "NCCL all-reduce of " << DTypeName(t) << ": only float32, float16 and bfloat16";
  abort();
}

std::string DeviceList(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) s += (s.empty() ? "" : ",") + d.ToString();
  return s;
}

// NCCL's account of the last failure, which says more than the error code's text (which
// link, which call of CUDA); it may belong to an earlier call, so it is quoted as such.
std::string Detail(ncclResult_t r) {
  std::string detail = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') detail += std::string(" (NCCL's last error: ") + last + ")";
  return detail;
}

}  // namespace

const char* NcclResultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult_t(unknown)";
  }
}

void FailNccl(ncclResult_t r, const char* expr, const char* file, int line) {
  cuda::FailCall("NCCL", NcclResultName(r), Detail(r).c_str(), expr, file, line);
}

Status NcclComms::Create(const std::vector<Device>& devices, std::unique_ptr<NcclComms>* out) {
  CHECK_GE(devices.size(), 2u) << "NCCL communicators for " << DeviceList(devices);
  std::vector<int> indices;
  for (const Device& d : devices) {
    CHECK(!d.is_cpu()) << "NCCL communicators for " << DeviceList(devices);
    indices.push_back(d.index);
    // The streams exist before NCCL runs on them, and each device is the thread's at least
    // once, so that its primary context is made by CUDA's runtime rather than inside NCCL.
    cuda::Context(d);
  }
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), indices.data());
  if (r != ncclSuccess) {
    return Status::Unavailable("NCCL could not connect " + DeviceList(devices) + ": " +
                               NcclResultName(r) + ": " + Detail(r) +
                               " (NCCL_DEBUG=INFO says why; NCCL_P2P_DISABLE=1 avoids peer links)");
  }
  out->reset(new NcclComms(devices, std::move(comms)));
  return Status::Ok();
}

NcclComms::NcclComms(std::vector<Device> devices, std::vector<ncclComm_t> comms)
    : devices_(std::move(devices)), comms_(std::move(comms)) {}

NcclComms::~NcclComms() {
  // Queued collectives still reference the communicators; and finalizing is collective over
  // the ranks, so one thread that holds them all must finalize them in one group (a rank
  // finalized alone would wait for the others forever) before destroying each.
  for (const Device& d : devices_) Synchronize(d);
  TALLY_NCCL_CHECK(ncclGroupStart());
  for (ncclComm_t c : comms_) TALLY_NCCL_CHECK(ncclCommFinalize(c));
  TALLY_NCCL_CHECK(ncclGroupEnd());
  for (ncclComm_t c : comms_) TALLY_NCCL_CHECK(ncclCommDestroy(c));
}

namespace {

// Communicators of different NcclComms may share GPUs (two kvstores of one process over the
// same devices). Each collective's kernels wait for their peers, so every stream must get
// the groups in the same order: one group at a time in the process.
std::mutex& GroupMutex() {
  static std::mutex mu;
  return mu;
}

// Closes the thread's NCCL group if the calls inside it are left by an exception (a failing
// CUDA call throws while a CUDA graph is being recorded, ops/cuda/capture.h); an open group
// would defer every later NCCL call of the thread.
struct GroupGuard {
  bool open = true;
  ~GroupGuard() {
    if (open) ncclGroupEnd();
  }
};

}  // namespace

void NcclComms::AllReduceSum(const std::vector<std::vector<Tensor>>& buffers) {
  const size_t n = devices_.size();
  std::lock_guard<std::mutex> lock(GroupMutex());
  TALLY_NCCL_CHECK(ncclGroupStart());
  GroupGuard group;
  for (const std::vector<Tensor>& set : buffers) {
    CHECK_EQ(set.size(), n) << "all-reduce over " << DeviceList(devices_);
    if (set[0].numel() == 0) continue;
    for (size_t d = 0; d < n; ++d) {
      const Tensor& t = set[d];
      CHECK(t.device() == devices_[d] && t.numel() == set[0].numel() && t.dtype() == set[0].dtype())
          << "all-reduce over " << DeviceList(devices_) << ": " << t.ToString() << " beside "
          << set[0].ToString();
      const cudaStream_t stream = cuda::Context(devices_[d]).stream;
      TALLY_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                                     NcclType(t.dtype()), ncclSum, comms_[d], stream));
    }
  }
  // Errors of the grouped calls surface here; the device named is whichever the thread used
  // last, so the call names them all.
  const std::string group_end = "ncclGroupEnd() of an all-reduce over " + DeviceList(devices_);
  group.open = false;
  CheckNccl(ncclGroupEnd(), group_end.c_str(), __FILE__, __LINE__);
}

}  // namespace tally
