#include "plan/simulate.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <utility>

#include <glog/logging.h>

namespace tally {
namespace plan_internal {
namespace {

std::vector<size_t> OrderBy(const std::vector<double>& when) {
  std::vector<size_t> order(when.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return when[a] < when[b]; });
  return order;
}

// The transfers waiting for each server's side, and which servers could start one now. A
// ResNet-50 step on 256 servers holds some 13,000 slices each way and a sweep replays it for
// every server count, so picking the next transfer must cost a logarithm, not a scan.
class Dispatcher {
 public:
  Dispatcher(const std::vector<Transfer>& transfers, const std::vector<double>& server_free)
      : transfers_(transfers), server_free_(server_free), waiting_(server_free.size()),
        registered_(server_free.size(), false), startable_(server_free.size(), false) {}

  void Admit(size_t i, double now) {
    const int s = transfers_[i].server;
    if (startable_[s] && i < waiting_[s].top()) {
      open_.erase({waiting_[s].top(), s});
      open_.insert({i, s});
    }
    waiting_[s].push(i);
    if (!registered_[s]) {
      registered_[s] = true;
      Register(s, now);
    }
  }
  // Servers whose side has come free by `now` may start their best waiting transfer.
  void Wake(double now) {
    while (!busy_.empty() && busy_.top().first <= now) {
      const int s = busy_.top().second;
      busy_.pop();
      open_.insert({waiting_[s].top(), s});
      startable_[s] = true;
    }
  }
  bool CanStart() const { return !open_.empty(); }
  double NextFree() const {
    return busy_.empty() ? std::numeric_limits<double>::infinity() : busy_.top().first;
  }
  // The highest-priority transfer that can start; the caller then updates server_free.
  size_t Take() {
    const auto [i, s] = *open_.begin();
    open_.erase(open_.begin());
    waiting_[s].pop();
    startable_[s] = false;
    return i;
  }
  // After a start on server s: it serves its next waiting transfer once free again.
  void Started(int s, double now) {
    if (waiting_[s].empty()) {
      registered_[s] = false;
    } else {
      Register(s, now);
    }
  }

 private:
  void Register(int s, double now) {
    if (server_free_[s] <= now) {
      open_.insert({waiting_[s].top(), s});
      startable_[s] = true;
    } else {
      busy_.push({server_free_[s], s});
    }
  }

  using MinIndex = std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>>;
  using FreeAt = std::pair<double, int>;
  const std::vector<Transfer>& transfers_;
  const std::vector<double>& server_free_;
  std::vector<MinIndex> waiting_;
  std::vector<bool> registered_;  // has waiting transfers: in open_ or in busy_
  std::vector<bool> startable_;   // in open_
  std::set<std::pair<size_t, int>> open_;  // (best waiting transfer, server) of free servers
  std::priority_queue<FreeAt, std::vector<FreeAt>, std::greater<FreeAt>> busy_;
};

}  // namespace

void SendAll(const std::vector<Transfer>& transfers, int workers, double bytes_per_s, double latency_s,
             Links* links, std::vector<double>* done) {
  const size_t n = transfers.size();
  done->assign(n, 0);
  std::vector<double> ready(n);
  for (size_t i = 0; i < n; ++i) ready[i] = transfers[i].ready;
  const std::vector<size_t> by_ready = OrderBy(ready);
  Dispatcher dispatch(transfers, links->server_free);
  double now = links->worker_free;
  size_t next = 0;
  for (size_t started = 0; started < n;) {
    while (next < n && ready[by_ready[next]] <= now) dispatch.Admit(by_ready[next++], now);
    dispatch.Wake(now);
    if (!dispatch.CanStart()) {
      const double wake = std::min(next < n ? ready[by_ready[next]] : std::numeric_limits<double>::infinity(),
                                   dispatch.NextFree());
      CHECK_GT(wake, now) << "plan: no transfer can ever start";
      now = wake;
      continue;
    }
    const size_t i = dispatch.Take();
    const Transfer& t = transfers[i];
    const double own = t.bytes / bytes_per_s;
    links->worker_free = now + own;
    links->server_free[t.server] = now + workers * own;
    (*done)[i] = links->server_free[t.server] + latency_s;
    dispatch.Started(t.server, now);
    now = links->worker_free;
    ++started;
  }
}

void UpdateAll(const std::vector<Transfer>& pushes, const std::vector<double>& arrived, int workers,
               double cpu_bytes_per_s, std::vector<double>* cpu_free, std::vector<double>* ready) {
  ready->assign(pushes.size(), 0);
  for (size_t i : OrderBy(arrived)) {
    double& free = (*cpu_free)[pushes[i].server];
    free = std::max(free, arrived[i]) + workers * pushes[i].bytes / cpu_bytes_per_s;
    (*ready)[i] = free;
  }
}

}  // namespace plan_internal
}  // namespace tally
