// DeviceBackend: how Tensor and Storage (base/tensor.h) reach memory other than the host's.
// base/ has no CUDA in it; tally_ops installs its backend (ops/device_backend.cc) before
// main runs, in every program that links tally_ops, so a program that links only base and
// the libraries above it that need no kernels (net, profile, scheduler) links no CUDA
// library, while everything else sees the GPU exactly as before.
//
//   const DeviceBackend* b = InstalledDeviceBackend();   // nullptr: no device support here
//   Status s = b ? b->check(dev) : NoDeviceBackend(dev);
//
// Without a backend every cuda:N is refused with the message of a build without CUDA, and
// allocating on one is a CHECK failure naming that reason.
//
// Thread-safety: InstallDeviceBackend runs during static initialisation, before any reader;
// the backend's functions are called from any thread.
#pragma once

#include <cstddef>
#include <memory>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

struct DeviceBackend {
  // OK for a device this process can use; otherwise why not (ops' CheckDevice).
  Status (*check)(const Device& device) = nullptr;
  // The members below may be null (a build of tally_ops without CUDA): then a non-host
  // tensor cannot exist, and a copy involving one fails as a build without CUDA does.
  std::shared_ptr<Storage> (*allocate)(size_t bytes, Device device) = nullptr;
  void (*copy)(const Tensor& src, Tensor* dst) = nullptr;  // any pair of devices, any dtypes
  void (*fill)(Tensor* t, float value) = nullptr;          // t on a device
  void (*zero)(Tensor* t) = nullptr;                       // t on a device
  // y[i0,i1,i2,i3] = x at the index permuted by perm; y on x's device.
  void (*permute4)(const Tensor& x, const int perm[4], Tensor* y) = nullptr;
};

// Installs `backend` (which must outlive the process); nullptr removes it.
void InstallDeviceBackend(const DeviceBackend* backend);
// The installed backend, or nullptr.
const DeviceBackend* InstalledDeviceBackend();

// The refusal of a device in a build, or a program, without CUDA: names the device and says
// how to get one.
Status NoDeviceBackend(const Device& device);

}  // namespace tally
