// `tally bench scaling`: emulated-GPU cluster runs over shaped links. The harness is
// tools/bench/scaling.py (network namespaces, `tc tbf`, tools/launch.py, the report); this
// command runs it with this executable as the job's binary and passes every argument on.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tools/bench.h"

namespace tally {

int BenchScaling(int argc, char** argv) {
  const std::string self = SelfExecutable();
  if (self.empty()) {
    std::fprintf(stderr, "tally bench scaling: cannot find this executable\n");
    return 1;
  }
  const std::string script = TallyHome() + "/tools/bench/scaling.py";
  std::vector<std::string> args = {"python3", script, "--tally", self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> exec_args;
  for (std::string& a : args) exec_args.push_back(a.data());
  exec_args.push_back(nullptr);
  execvp("python3", exec_args.data());
  std::perror("tally bench scaling: python3");
  return 1;
}

}  // namespace tally
