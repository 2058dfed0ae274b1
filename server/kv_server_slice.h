// The state KVServer keeps per slice and per waiting pull: internal to server/, shared by
// kv_server.cc (requests and answers) and kv_server_update.cc (applying steps, skipping and
// rolling them back). See server.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "server/server.h"
#include "server/slice_aggregator.h"

namespace tally {

struct KVServer::PendingPull {
  wire::Meta request;
  std::vector<Slice*> slices;
  int64_t step = 0;   // answered once every slice has this step visible (request.step(),
                      // or for a PUSH held back, the step it waits for)
  int remaining = 0;  // slices whose update of `step` is still to come
  bool push_not_applied = false;  // dist_async PUSHPULL: its push was not finite, not applied
  bool push_only = false;  // a sync PUSH under replication: answered, without data, once visible
};

struct KVServer::Slice {
  int id = 0;  // the Updater's key for this slice's optimizer state
  uint64_t key = 0, offset = 0;
  int64_t length = 0;
  Tensor value;  // fp32 master values
  int64_t applied = -1;
  int64_t newest = -1;  // async: the newest step of any push taken, applied or not
  // The first step whose push asked the job to stop (Meta.stop); INT64_MAX: none.
  int64_t stop_from = INT64_MAX;
  // Its pushes, gathered (sync) or remembered (async), and their sum.
  SliceAggregator pushes;
  std::vector<std::shared_ptr<PendingPull>> waiting;
  // Non-finite gradients (sync). `skipped`: the last step skipped here, its sum not finite
  // or its update rolled back; answers of that step say so. nonfinite_ranks: the workers
  // whose own push of it was not finite (empty: the sum overflowed, or it was rolled back).
  int64_t skipped = -1;
  std::vector<int> nonfinite_ranks;
  std::set<int64_t> skip_when_ready;  // steps rolled back before their pushes were all in
  // One-step undo: the values before the update of undo_step (-1: none to undo), and the
  // optimizer's own copy of its state (Updater::SaveState).
  Tensor undo;
  int64_t undo_step = -1;
  // --server-replicas: the rank of the server whose chain holds the slice (-1: none), and,
  // while this server is its primary, the steps forwarded to backups and not yet
  // acknowledged, with the backups (ranks) still owing. A step is visible (answered) once
  // applied and acknowledged by every live backup.
  int chain = -1;
  std::map<int64_t, std::set<int>> owed;
};

}  // namespace tally
