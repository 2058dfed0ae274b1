// ParallelFor: one pool of worker threads for the work that a single message or array splits
// into independent pieces: sealing and opening a large message's records (net/), converting
// and summing large arrays on the servers (optim/reduce.h).
//
//   ParallelFor(records.size(), [&](size_t i) { Seal(records[i]); });   // returns when all are done
//
// The pool has one thread fewer than the cores, at most 7, started on first use and never
// stopped; they sleep on a condition variable between batches (not spinning, as an OpenMP
// team would, on the cores the transport's threads need). The caller works on its own batch
// too, so a batch never waits for a free thread. Thread-safe: batches from several threads
// share the pool.
#pragma once

#include <cstddef>
#include <functional>

namespace tally {

// Runs fn(0) ... fn(n - 1), spread over the pool and the calling thread; returns when all
// are done. fn must not call ParallelFor.
void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

// The threads a ParallelFor may use, the caller's included.
size_t ParallelForThreads();

// memcpy(dst, src, bytes) for buffers that do not overlap, a large one cut into pieces
// spread over the pool: a server's undo copy of a multi-MB slice before each update would
// otherwise hold its one serving thread for milliseconds a step. Not from inside a
// ParallelFor's fn.
void ParallelCopy(void* dst, const void* src, size_t bytes);

}  // namespace tally
