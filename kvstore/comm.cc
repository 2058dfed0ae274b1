// Comm (comm.h): the host implementation, the factory and Broadcast. The GPU implementation
// is comm_nccl.cc, compiled only with CUDA.
#include "kvstore/comm.h"

#include <map>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "optim/reduce.h"

namespace tally {

#ifdef TALLY_HAVE_CUDA
// comm_nccl.cc. REQUIRES: devices are distinct GPUs that exist.
Status NewNcclComm(const std::vector<Device>& devices, std::unique_ptr<Comm>* out);
#endif

namespace {

class CpuComm : public Comm {
 public:
  CpuComm(std::vector<Device> devices, MergedDType merged) : Comm(std::move(devices)), merged_(merged) {}

  Tensor Reduce(int key, const std::vector<Tensor>& vals) override;

 private:
  struct Buffers {
    Tensor merged;  // the sum, in the merged dtype
    Tensor f32;     // its fp32 accumulator when that dtype is 16-bit
  };
  // *t, reallocated as shape/dtype unless it is already of that size and dtype and held by
  // no one else.
  static void Fit(const Shape& shape, DType dtype, Tensor* t);

  const MergedDType merged_;
  std::map<int, Buffers> buffers_;
};

void CpuComm::Fit(const Shape& shape, DType dtype, Tensor* t) {
  // A buffer also held elsewhere may still be read (an earlier sum's slices waiting to be
  // sent): it is not ours to overwrite.
  if (t->defined() && t->dtype() == dtype && t->numel() == NumElements(shape) && t->storage().use_count() == 1) {
    return;
  }
  *t = Tensor::Empty(shape, dtype);
}

Tensor CpuComm::Reduce(int key, const std::vector<Tensor>& vals) {
  CHECK_EQ(vals.size(), devices().size()) << "sum of key " << key;
  const DType dtype = merged_ == MergedDType::kFloat32 ? DType::kF32 : vals[0].dtype();
  if (vals.size() == 1 && vals[0].dtype() == dtype) return vals[0];
  Buffers& b = buffers_[key];
  Fit(vals[0].shape(), dtype, &b.merged);
  if (dtype == DType::kF32) {
    SumInF32(vals, &b.merged);
    return b.merged;
  }
  // 16-bit: summed in fp32, then rounded once.
  if (!b.f32.defined() || b.f32.numel() != vals[0].numel()) b.f32 = Tensor::Empty(vals[0].shape(), DType::kF32);
  SumInF32(vals, &b.f32);
  b.merged.CopyFrom(b.f32);
  return b.merged;
}

std::string DeviceList(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) s += (s.empty() ? "" : ",") + d.ToString();
  return s;
}

}  // namespace

std::vector<Tensor> Comm::Reduce(const std::vector<int>& keys, const std::vector<std::vector<Tensor>>& vals) {
  CHECK_EQ(keys.size(), vals.size());
  std::vector<Tensor> merged;
  merged.reserve(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) merged.push_back(Reduce(keys[k], vals[k]));
  return merged;
}

void Comm::Broadcast(const Tensor& src, const std::vector<Tensor>& outs) const {
  CHECK_EQ(outs.size(), devices_.size()) << "broadcast of " << src.ToString();
  for (const Tensor& o : outs) {
    Tensor out = o;  // a handle: the copy lands in the caller's storage
    out.CopyFrom(src);
  }
}

Status NewComm(const std::vector<Device>& devices, MergedDType merged, std::unique_ptr<Comm>* out) {
  if (devices.empty()) return Status::InvalidArgument("a sum over no devices");
  size_t gpus = 0;
  for (const Device& d : devices) gpus += d.is_cpu() ? 0 : 1;
  if (gpus == 0) {
    out->reset(new CpuComm(devices, merged));
    return Status::Ok();
  }
  if (gpus != devices.size()) {
    return Status::InvalidArgument("a sum over " + DeviceList(devices) + ": host devices and GPUs mixed");
  }
  if (merged != MergedDType::kAsValues) {
    return Status::InvalidArgument("a sum over " + DeviceList(devices) + " in fp32: NCCL sums in the values' dtype");
  }
#ifdef TALLY_HAVE_CUDA
  return NewNcclComm(devices, out);
#else
  return Status::InvalidArgument("a sum over " + DeviceList(devices) + ": this tally was built without CUDA");
#endif
}

}  // namespace tally
