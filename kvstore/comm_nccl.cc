// Comm (comm.h) on GPUs: NCCL's in-place all-reduce. Compiled only with CUDA.
#include <memory>
#include <utility>

#include <glog/logging.h>

#include "kvstore/comm.h"
#include "kvstore/nccl_comm.h"

namespace tally {
namespace {

class NcclComm : public Comm {
 public:
  // comms: null with one GPU, where there is nothing to sum.
  NcclComm(std::vector<Device> devices, std::unique_ptr<NcclComms> comms)
      : Comm(std::move(devices)), comms_(std::move(comms)) {}

  Tensor Reduce(int key, const std::vector<Tensor>& vals) override {
    return Reduce(std::vector<int>{key}, std::vector<std::vector<Tensor>>{vals})[0];
  }

  std::vector<Tensor> Reduce(const std::vector<int>& keys, const std::vector<std::vector<Tensor>>& vals) override {
    CHECK_EQ(keys.size(), vals.size());
    if (comms_ != nullptr) comms_->AllReduceSum(vals);  // checks each set's devices, sizes and dtype
    std::vector<Tensor> merged;
    merged.reserve(vals.size());
    for (const std::vector<Tensor>& set : vals) {
      CHECK_EQ(set.size(), devices().size()) << "sum of key " << keys[merged.size()];
      merged.push_back(set[0]);
    }
    return merged;
  }

 private:
  const std::unique_ptr<NcclComms> comms_;
};

}  // namespace

Status NewNcclComm(const std::vector<Device>& devices, std::unique_ptr<Comm>* out) {
  std::unique_ptr<NcclComms> comms;
  if (devices.size() > 1) TALLY_RETURN_IF_ERROR(NcclComms::Create(devices, &comms));
  out->reset(new NcclComm(devices, std::move(comms)));
  return Status::Ok();
}

}  // namespace tally
