#include "kvstore/kvstore.h"

#include <ostream>

#include "kvstore/factories.h"
#include "kvstore/local_kvstore.h"

namespace tally {

namespace {

// --kv-store's values, in KVStoreType's order.
const std::vector<std::string>& TypeNames() {
  static const auto* names =
      new std::vector<std::string>{"local", "device", "dist_sync", "dist_device_sync", "dist_async"};
  return *names;
}

}  // namespace

const std::string& KVStoreTypeName(KVStoreType type) { return TypeNames().at(static_cast<size_t>(type)); }

std::ostream& operator<<(std::ostream& os, KVStoreType type) { return os << KVStoreTypeName(type); }

Status ParseKVStoreType(const std::string& name, KVStoreType* out) {
  for (size_t i = 0; i < TypeNames().size(); ++i) {
    if (name == TypeNames()[i]) {
      *out = static_cast<KVStoreType>(i);
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown --kv-store '" + name +
                                 "' (local, device, dist_sync, dist_device_sync or dist_async)");
}

Status KVStore::Create(const KVStoreSpec& spec, std::unique_ptr<KVStore>* out) {
  const std::string& type = KVStoreTypeName(spec.type);
  if (IsDistributed(spec.type) && spec.cluster != nullptr) {
    return spec.gpus.empty() ? NewDistKVStore(spec.type, spec.num_devices, spec.cluster, out)
                             : NewDistKVStoreOnGpus(spec.type, spec.gpus, spec.cluster, out);
  }
  if (!spec.gpus.empty()) return NewGpuKVStore(spec.type, spec.gpus, out);
  if (spec.num_devices < 1) return Status::InvalidArgument("a kvstore needs at least one device");
  if (IsDistributed(spec.type)) {
    return Status::InvalidArgument("--kv-store " + type +
                                   " needs the parameter server: this process has not joined a job "
                                   "(KVStoreSpec::cluster)");
  }
  out->reset(new LocalKVStore(spec.num_devices, /*update_on_devices=*/spec.type == KVStoreType::kDevice));
  return Status::Ok();
}

#ifndef TALLY_HAVE_CUDA
Status NewGpuKVStore(KVStoreType type, const std::vector<Device>& devices, std::unique_ptr<KVStore>* out) {
  return Status::InvalidArgument("--kv-store " + KVStoreTypeName(type) +
                                 " on GPUs: this tally was built without CUDA");
}
#endif

Status InitEach(const std::vector<int>& keys, const std::vector<Tensor>& values,
                const std::function<Status(int, const Tensor&)>& init_key) {
  if (keys.size() != values.size()) {
    return Status::InvalidArgument("kvstore Init with " + std::to_string(keys.size()) + " keys and " +
                                   std::to_string(values.size()) + " values");
  }
  for (size_t i = 0; i < keys.size(); ++i) TALLY_RETURN_IF_ERROR(init_key(keys[i], values[i]));
  return Status::Ok();
}

MembershipView::Membership MembershipView::Everyone(int num_workers) {
  Membership m;
  for (int r = 0; r < num_workers; ++r) m.live.push_back(r);
  return m;
}

MembershipView::Membership FixedMembership::membership() const { return Everyone(kv_->num_workers()); }

int FixedMembership::summed_workers() const { return kv_->num_workers(); }

Status KVStore::PushPull(int key, const std::vector<Tensor>& vals, const std::vector<Tensor>& outs,
                         int priority) {
  TALLY_RETURN_IF_ERROR(Push(key, vals, priority));
  return Pull(key, outs, priority);
}

}  // namespace tally
