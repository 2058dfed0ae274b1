// A program on tally_scheduler alone, for tests/layers/scheduler_probe_test.sh: the scheduler
// role, with the net, profiler and base libraries it pulls in, and no kernels. The test
// checks with ldd and nm that no CUDA library or symbol comes with them.
//   scheduler_probe              prints the scheduler's entry point and a host tensor
//   scheduler_probe parse DEV    prints ParseDevice's answer; exits 1 when DEV is refused
#include <cstdio>
#include <cstring>

#include "base/tensor.h"
#include "net/transport.h"
#include "scheduler/scheduler.h"

int main(int argc, char** argv) {
  using namespace tally;
  if (argc == 3 && std::strcmp(argv[1], "parse") == 0) {
    Device d;
    Status s = ParseDevice(argv[2], &d);
    std::printf("%s\n", s.ok() ? "ok" : s.message().c_str());
    return s.ok() ? 0 : 1;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: scheduler_probe [parse DEVICE]\n");
    return 2;
  }
  // Taking their addresses links the scheduler and the ZeroMQ transport into the probe.
  Status (*run)(const ClusterConfig&, std::unique_ptr<Transport>, const std::function<void()>&,
                std::function<void(const Status&)>, const SchedulerOptions&) = RunScheduler;
  std::unique_ptr<Transport> (*transport)(int, const JobAuth*) = NewZmqTransport;
  Tensor t = Tensor::Zeros({4}, DType::kF32);
  std::printf("RunScheduler at %p, NewZmqTransport at %p, %s\n", reinterpret_cast<void*>(run),
              reinterpret_cast<void*>(transport), t.ToString().c_str());
  return 0;
}
