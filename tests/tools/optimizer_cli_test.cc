// `tally train --optimizer X` with MXNet's parameter flags: each rule trains a small job to
// the end, and a bad parameter is refused before the job starts, naming its flag.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

std::string TallyBinary() {
  const char* bin = std::getenv("TALLY_BINARY");
  return bin != nullptr && *bin != '\0' ? bin : TALLY_BINARY;
}

CliRun Tally(const std::string& args) {
  const std::string cmd = TallyBinary() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const char* kSmall =
    "train --num-layers 8 --image-shape 3,12,12 --num-classes 4 --batch-size 16 --kv-store local "
    "--num-examples 64 --disp-batches 4 --num-epochs 1 --num-val-examples 16";

TEST(OptimizerCli, EachServerOptimizerTrainsASmallJob) {
  for (const char* flags : {"--optimizer adam --lr 0.01 --beta1 0.85 --epsilon 1e-6",
                            "--optimizer lars --lr 1 --eta 0.002 --mom 0.9 --momentum-correction false",
                            "--optimizer lamb --lr 0.01 --upper-bound 10 --bias-correction 0",
                            "--optimizer rmsprop --lr 0.001 --centered 1 --gamma2 0.8 --clip-weights 5"}) {
    const CliRun r = Tally(std::string(kSmall) + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find("Epoch[0] Validation-accuracy="), std::string::npos) << flags << "\n" << r.output;
  }
}

TEST(OptimizerCli, ABadParameterIsRefusedNamingItsFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--optimizer adamax", "--optimizer 'adamax'"}, {"--optimizer adam --beta1 1", "--beta1"},
      {"--optimizer adam --beta2 -0.5", "--beta2"},   {"--optimizer adagrad --epsilon -2", "--epsilon"},
      {"--optimizer rmsprop --gamma1 1.5", "--gamma1"}, {"--optimizer lars --eta 0", "--eta"},
      {"--optimizer signum --wd-lh -1", "--wd-lh"},
      {"--optimizer lamb --lower-bound 3 --upper-bound 2", "--lower-bound"}};
  for (const auto& [flags, words] : cases) {
    const CliRun r = Tally(std::string(kSmall) + " " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.output.find(words), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("Epoch[0]"), std::string::npos) << flags << ": trained before refusing";
  }
}

}  // namespace
