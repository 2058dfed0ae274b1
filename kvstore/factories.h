// The constructors behind KVStore::Create (kvstore.cc), one per kind of store, and what the
// single-process stores share. Internal to kvstore/: everyone else makes stores through
// KVStore::Create and a KVStoreSpec.
//
//   std::unique_ptr<KVStore> kv;
//   TALLY_RETURN_IF_ERROR(NewDistKVStore(KVStoreType::kDistSync, /*num_devices=*/1, cluster, &kv));
//
// Each checks what it is given and fails with a message naming --kv-store or --gpus.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kvstore/kvstore.h"

namespace tally {

// local and device on GPUs (gpu_kvstore.h); the distributed types are refused. Without CUDA
// (kvstore.cc) it refuses everything, saying so.
Status NewGpuKVStore(KVStoreType type, const std::vector<Device>& devices, std::unique_ptr<KVStore>* out);

// The distributed types over the Cluster the worker joined (dist_kvstore.h).
Status NewDistKVStore(KVStoreType type, int num_devices, Cluster* cluster, std::unique_ptr<KVStore>* out);

// The distributed types on a worker whose replicas are on GPUs (gpu_dist_kvstore.h). Without
// CUDA (dist_kvstore.cc) it refuses, saying so.
Status NewDistKVStoreOnGpus(KVStoreType type, const std::vector<Device>& devices, Cluster* cluster,
                            std::unique_ptr<KVStore>* out);

// The single-process types' Init of many keys: init_key of each in turn, after checking
// that there is one value per key. Stops at the first refusal.
Status InitEach(const std::vector<int>& keys, const std::vector<Tensor>& values,
                const std::function<Status(int, const Tensor&)>& init_key);

}  // namespace tally
