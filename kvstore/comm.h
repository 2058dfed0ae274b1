// Comm: the one place where a store sums a key's values over this process's devices
// (Reduce) and copies one value out to every device (Broadcast), as MXNet's comm.h does for
// its stores. Every store goes through it: local and device on host devices (LocalKVStore)
// and on GPUs (GpuKVStore), and the distributed types before they push (DistKVStore,
// GpuDistKVStore). Internal to kvstore/.
//
//   std::unique_ptr<Comm> comm;
//   TALLY_RETURN_IF_ERROR(NewComm(std::vector<Device>(2, Device::Cpu()), MergedDType::kFloat32, &comm));
//   const Tensor merged = comm->Reduce(key, {grad0, grad1});   // grad0 + grad1, in fp32
//   updater.Update(key, merged, &stored);
//   comm->Broadcast(stored, {out0, out1});                     // each out <- stored
//
// NewComm picks the implementation from the devices:
//   host devices  sums on the CPU (SumInF32, optim/reduce.h): each value converted to fp32,
//                 vals[1], vals[2], ... added to vals[0] in device order, element by element,
//                 never in completion order, so every run rounds the same way. The sum goes
//                 into a buffer Comm keeps per key, in fp32 or rounded to the values' dtype
//                 (MergedDType). One value already of that dtype is returned as it is.
//   GPUs          sums in place with NCCL's all-reduce (NcclComms, nccl_comm.h), queued on
//                 each device's stream: once it has run, every vals[d] holds the sum, the same
//                 bits on every device, and Reduce returns vals[0]. The sum is in the values'
//                 own dtype (MergedDType::kAsValues). One GPU: nothing to sum.
//
// Broadcast copies with Tensor::CopyFrom, converting the dtype: host to host at once, and
// to a GPU queued on its stream (a page-locked source is copied without staging).
//
// Thread-safety: none; driven by the store's one thread (NCCL needs every call of a group
// from one thread).
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {

// The dtype of a sum of host values.
enum class MergedDType {
  kFloat32,   // fp32: an optimizer here applies it (local, device)
  kAsValues,  // the values' dtype: it travels on (dist_*: fp16 gradients travel as fp16)
};

class Comm {
 public:
  virtual ~Comm() = default;

  // The devices summed over: vals and outs have one tensor per device, in this order.
  const std::vector<Device>& devices() const { return devices_; }

  // The sum of vals (vals[d] from devices()[d]), as described above. A returned buffer of
  // Comm's is rewritten by the next Reduce of key, unless still held by someone (a sum on
  // its way to a server): it is then left alone and a fresh one taken.
  // REQUIRES: one value per device, all of key's size; host: f32, f16 or bf16 on the CPU;
  // GPUs: on their device, of one dtype (f32, f16 or bf16).
  virtual Tensor Reduce(int key, const std::vector<Tensor>& vals) = 0;
  // Reduce of many keys: vals[k] is keys[k]'s. On GPUs every key goes in one NCCL group (one
  // launch per device for the lot); on the host it is Reduce of each key in turn.
  virtual std::vector<Tensor> Reduce(const std::vector<int>& keys,
                                     const std::vector<std::vector<Tensor>>& vals);

  // outs[d] <- src, converted to outs[d]'s dtype. REQUIRES: one output per device, each of
  // src's size.
  void Broadcast(const Tensor& src, const std::vector<Tensor>& outs) const;

 protected:
  explicit Comm(std::vector<Device> devices) : devices_(std::move(devices)) {}

 private:
  const std::vector<Device> devices_;
};

// The Comm for devices: all host devices (Device::Cpu(), one entry per replica), or distinct
// GPUs. Refuses an empty list, a mix of host devices and GPUs, GPUs in a build without CUDA
// and a sum of GPU values in fp32 (NCCL sums in the values' dtype); fails, with NCCL's
// account, when NCCL cannot connect the GPUs. REQUIRES: the GPUs exist (CheckDevice).
Status NewComm(const std::vector<Device>& devices, MergedDType merged, std::unique_ptr<Comm>* out);

}  // namespace tally
