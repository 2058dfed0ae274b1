// tally_ops' DeviceBackend (base/device_backend.h): the CUDA side of base's tensors. It is
// installed by ops/install_backend.cc, which every program linking tally_ops contains.
#include "base/device_backend.h"

#include "ops/device.h"
#ifdef TALLY_HAVE_CUDA
#include "ops/cuda/runtime.h"
#endif

namespace tally {
namespace {

DeviceBackend MakeOpsDeviceBackend() {
  DeviceBackend b;
  b.check = CheckDevice;
#ifdef TALLY_HAVE_CUDA
  b.allocate = cuda::AllocateDevice;
  b.copy = cuda::CopyTensor;
  b.fill = cuda::FillTensor;
  b.zero = cuda::ZeroTensor;
  b.permute4 = cuda::Permute4;
#endif
  return b;
}

}  // namespace

void InstallOpsDeviceBackend() {
  static const DeviceBackend backend = MakeOpsDeviceBackend();
  InstallDeviceBackend(&backend);
}

}  // namespace tally
