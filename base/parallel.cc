#include "base/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_name.h"

namespace tally {
namespace {

// Each ParallelFor call is a batch whose indices the caller and any idle helpers take one
// at a time.
class WorkerPool {
 public:
  static WorkerPool& Get() {
    static WorkerPool* pool = new WorkerPool;  // never destroyed: helpers may outlive main's statics
    return *pool;
  }

  size_t threads() const { return threads_.size(); }

  void Run(size_t n, const std::function<void(size_t)>& fn) {
    auto batch = std::make_shared<Batch>(n, fn);
    const size_t helpers = std::min(n - 1, threads_.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < helpers; ++i) queue_.push_back(batch);
    }
    cv_.notify_all();
    Drain(batch.get());
    std::unique_lock<std::mutex> lock(batch->mu);
    batch->cv.wait(lock, [&] { return batch->done == batch->n; });
  }

 private:
  struct Batch {
    Batch(size_t n, const std::function<void(size_t)>& fn) : n(n), fn(fn) {}
    const size_t n;
    const std::function<void(size_t)>& fn;  // outlives the batch: Run waits for every index
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;  // GUARDED_BY(mu)
  };

  WorkerPool() {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i + 1 < std::min(cores, 8u); ++i) threads_.emplace_back([this, i] {
      NameThisThread("tally-pool-" + std::to_string(i));
      Loop();
    });
  }

  static void Drain(Batch* b) {
    size_t finished = 0;
    for (size_t i; (i = b->next.fetch_add(1)) < b->n; ++finished) b->fn(i);
    if (finished == 0) return;
    std::lock_guard<std::mutex> lock(b->mu);
    b->done += finished;
    if (b->done == b->n) b->cv.notify_all();
  }

  void Loop() {
    while (true) {
      std::shared_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      Drain(batch.get());
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> queue_;  // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace

void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1) return fn(0);
  WorkerPool::Get().Run(n, fn);
}

size_t ParallelForThreads() { return WorkerPool::Get().threads() + 1; }

void ParallelCopy(void* dst, const void* src, size_t bytes) {
  // A piece is large enough that waking a pool thread (microseconds) is a small part of it.
  constexpr size_t kPiece = size_t{512} << 10;
  const size_t pieces = std::min(bytes / kPiece, ParallelForThreads());
  if (pieces <= 1) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  ParallelFor(pieces, [&](size_t p) {
    const size_t begin = bytes * p / pieces, end = bytes * (p + 1) / pieces;
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  });
}

}  // namespace tally
