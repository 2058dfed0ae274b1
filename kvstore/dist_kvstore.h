// DistKVStore: the worker's side of the parameter server, the kvstore types dist_sync,
// dist_device_sync and dist_async (kvstore.h), over a Cluster the caller joined. Made by
// KVStore::Create when the spec names a distributed type and a cluster.
//
//   std::unique_ptr<Cluster> cluster;
//   TALLY_RETURN_IF_ERROR(Cluster::Join(cfg, NewZmqTransport(), &cluster));
//   KVStoreSpec spec;
//   spec.type = KVStoreType::kDistSync;
//   spec.cluster = cluster.get();
//   std::unique_ptr<KVStore> kv;
//   TALLY_RETURN_IF_ERROR(KVStore::Create(spec, &kv));
//   TALLY_RETURN_IF_ERROR(kv->SetOptimizer(opt));          // before Init; sent by worker 0
//   TALLY_RETURN_IF_ERROR(kv->Init(keys, values));         // every worker, every key, once
//   for (int key : keys) kv->PushPull(key, grads[key], weights[key], /*priority=*/-key);
//   TALLY_RETURN_IF_ERROR(kv->WaitAll());
//
// Init places the keys on the servers (Placement, from all sizes), worker 0 sends the
// optimizer and the initial values, and every worker waits for the others (a barrier).
// Push sums the worker's own devices in device order, then sends one PUSH per slice of the
// key to the server holding it, in the values' dtype (fp16 gradients travel as fp16), with
// the key's step counter (0, 1, 2, ...). Pull asks each server for its slices after the
// worker's last push of the key and copies the answers straight into outs[0], converting
// the dtype, then outs[0] into the other devices' outputs. dist_device_sync behaves as
// dist_sync here (CPU devices are summed in memory). PushPull sends one PUSHPULL per slice,
// a push the server answers with the values after its update: one round trip, not two.
//
// A worker that joined a running --elastic job (TALLY_JOIN=1: Cluster::joined_after_epoch
// > 0; docs/faults.md, "A worker joins") calls the same Init: it sends no optimizer, no INIT
// and passes no barrier (the servers hold the job's weights and the others are long past
// theirs), waits for the scheduler's MEMBERSHIP naming it live, and writes into `values`
// the job's weights after the step before that change's from_step, exactly those (a pull of
// that step, which no server can pass without this worker's push). Its pushes then count
// from that step (membership_view.h: first_step()), and HeardMembership holds every change
// from the job's start (the scheduler tells a joiner the past ones).
//
// Skipped steps (trainer_hooks.h, docs/wire.md): when an answer of step t says a server skipped
// it for a non-finite gradient, WaitAll sends one ROLLBACK per slice of every key last
// pushed at step t, writes the values the servers restored into the keys' last pull
// outputs, and only then returns; TakeSkippedStep reports the step.
//
// Priority: requests wait in one queue and a sending thread takes the highest priority
// first (equal priorities in call order); a request that finds the queue empty and nothing
// being sent goes out at once from the caller's thread. Training gives key k priority -k, so when the
// wire is the bottleneck the first layers' weights, which the next forward pass needs
// first, overtake the rest. SET_LR goes ahead of everything still queued (it names the step
// from which it applies, so overtaking older pushes is harmless).
//
// Buffers: pushed tensors are sent without copying (slices are views), so they must not be
// written, nor pulled ones read, until WaitAll returns. WaitAll fails at once when the
// cluster reports a dead node, and after a timeout otherwise; after a failed WaitAll the
// job is over (late answers may still land in the pulled tensors).
//
// With KVStoreSpec::gpus, the same types on a worker whose replicas are on GPUs
// (gpu_dist_kvstore.h): the gradients are summed across the GPUs with NCCL, copied to
// page-locked host memory without stalling the backward pass, and pushed as one; the pulled
// weights are uploaded to every GPU at WaitAll. Fails in a build without CUDA.
//
// Thread-safety: driven by one thread, like every KVStore; answers are handled on the
// cluster's receive thread. REQUIRES: the Cluster outlives the store, and the store is the
// cluster's only data handler.
#pragma once

#include "kvstore/kvstore.h"
#include "net/cluster.h"

namespace tally {

// How long WaitAll and the Init barrier wait for the servers before giving up (ms). The
// default (10 minutes) only catches hangs: dead nodes are reported by the cluster at once.
constexpr int kDistWaitTimeoutMs = 600000;

}  // namespace tally
