// Installs tally_ops' device backend before main runs. This file is not part of the
// tally_ops archive: ops/CMakeLists.txt puts its object on the link line of every program
// that links tally_ops, so the linker cannot leave it out (no symbol of it is referenced),
// and base's tensors reach the GPU wherever the kernels are linked.
#include "ops/device.h"

namespace {

[[maybe_unused]] const bool kOpsDeviceBackendInstalled = (tally::InstallOpsDeviceBackend(), true);

}  // namespace
