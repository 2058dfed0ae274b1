// A small program on the ops library alone, for tests/cpu_only/cpu_only_test.sh: it asks a
// build for a GPU the way `tally train --gpus 0` does, and prints what the build answers.
//   cpu_only_probe parse cuda:0   prints ParseDevice's error and exits 1 (0 if accepted)
//   cpu_only_probe alloc          allocates a tensor on cuda:0 (a CHECK failure without CUDA)
#include <cstdio>
#include <cstring>
#include <string>

#include "ops/device.h"
#include "base/tensor.h"

int main(int argc, char** argv) {
  using namespace tally;
  if (argc == 3 && std::strcmp(argv[1], "parse") == 0) {
    Device d;
    Status s = ParseDevice(argv[2], &d);
    std::printf("built with CUDA: %s; %s: %s\n", BuiltWithCuda() ? "yes" : "no", argv[2],
                s.ok() ? "ok" : s.message().c_str());
    return s.ok() ? 0 : 1;
  }
  if (argc == 2 && std::strcmp(argv[1], "alloc") == 0) {
    Tensor t = Tensor::Empty({4}, DType::kF32, Device{Device::Kind::kCuda, 0});
    std::printf("allocated %s\n", t.ToString().c_str());
    return 0;
  }
  std::fprintf(stderr, "usage: cpu_only_probe parse DEVICE | alloc\n");
  return 2;
}
