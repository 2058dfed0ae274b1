// The resources of the plan's replay (private to plan/): the links a request crosses and the
// servers' CPUs, each a serial resource whose free time carries over from step to step.
#pragma once

#include <vector>

namespace tally {
namespace plan_internal {

// One slice's request in one direction, from the N workers to its server (pushes) or back
// (answers). Its priority is its index in the vector handed over: lower goes first.
struct Transfer {
  double ready = 0;  // when the sender may start it (seconds)
  int server = 0;
  double bytes = 0;  // one worker's copy
};

// One direction's links: the representative worker's side and each server's side.
struct Links {
  double worker_free = 0;
  std::vector<double> server_free;
};

// Sends every transfer, one at a time on the worker's side. Whenever the worker's side is free
// it starts, among the transfers that are ready and whose server's side is free, the one of
// the highest priority; when none can start it waits for the next to become possible. A start
// holds the worker's side for bytes / bytes_per_s and the server's side for N times that (the
// N symmetric workers' copies share it). done[i]: when every copy of transfer i has arrived,
// latency_s after the server's side is released.
void SendAll(const std::vector<Transfer>& transfers, int workers, double bytes_per_s, double latency_s,
             Links* links, std::vector<double>* done);

// Each server sums the N copies of a slice and updates it once all have arrived, in order of
// arrival, taking N * bytes / cpu_bytes_per_s. ready[i]: when slice i's answer can leave.
void UpdateAll(const std::vector<Transfer>& pushes, const std::vector<double>& arrived, int workers,
               double cpu_bytes_per_s, std::vector<double>* cpu_free, std::vector<double>* ready);

}  // namespace plan_internal
}  // namespace tally
