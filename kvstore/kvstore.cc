#include "kvstore/kvstore.h"

#include "kvstore/local_kvstore.h"

namespace tally {

Status KVStore::Create(const std::string& type, int num_devices, std::unique_ptr<KVStore>* out) {
  if (num_devices < 1) return Status::InvalidArgument("a kvstore needs at least one device");
  if (type == "local") {
    out->reset(new LocalKVStore(num_devices, /*update_on_devices=*/false));
    return Status::Ok();
  }
  if (type == "device") {
    out->reset(new LocalKVStore(num_devices, /*update_on_devices=*/true));
    return Status::Ok();
  }
  if (type == "dist_sync" || type == "dist_device_sync" || type == "dist_async") {
    return Status::InvalidArgument("--kv-store " + type +
                                   " needs the parameter server: this process has not joined a job "
                                   "(CreateDistKVStore takes the Cluster)");
  }
  return Status::InvalidArgument("unknown --kv-store '" + type +
                                 "' (local, device, dist_sync, dist_device_sync or dist_async)");
}

Status KVStore::SetGradientScale(float scale) {
  if (scale == 1.0f) return Status::Ok();
  return Status::InvalidArgument("--kv-store " + type() + " does not take a loss scale (float16 "
                                 "training with dynamic loss scaling needs local or device)");
}

Status KVStore::KeepStepOnDevice(const std::vector<DeviceStepState>& per_device) {
  return Status::InvalidArgument("--kv-store " + type() + " cannot keep a step on the device (only local "
                                 "and device on GPUs can)");
}

Status KVStore::GetMasterWeights(const std::vector<int>& keys, std::vector<Tensor>* out) {
  return Status::InvalidArgument("--kv-store " + type() + " keeps no fp32 master weights here");
}

Status KVStore::SetMasterWeights(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  return Status::InvalidArgument("--kv-store " + type() + " keeps no fp32 master weights here");
}

#ifndef TALLY_HAVE_CUDA
Status KVStore::CreateOnGpus(const std::string& type, const std::vector<Device>& devices,
                             std::unique_ptr<KVStore>* out) {
  return Status::InvalidArgument("--kv-store " + type + " on GPUs: this tally was built without CUDA");
}
#endif

Status KVStore::Init(const std::vector<int>& keys, const std::vector<Tensor>& values) {
  if (keys.size() != values.size()) {
    return Status::InvalidArgument("kvstore Init with " + std::to_string(keys.size()) + " keys and " +
                                   std::to_string(values.size()) + " values");
  }
  for (size_t i = 0; i < keys.size(); ++i) TALLY_RETURN_IF_ERROR(Init(keys[i], values[i]));
  return Status::Ok();
}

Status KVStore::PushPull(int key, const std::vector<Tensor>& vals, const std::vector<Tensor>& outs,
                         int priority) {
  TALLY_RETURN_IF_ERROR(Push(key, vals, priority));
  return Pull(key, outs, priority);
}

}  // namespace tally
