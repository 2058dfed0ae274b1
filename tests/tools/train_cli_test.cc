// `tally train` as a user runs it: MXNet's log lines, and refusals that name the flag.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "ops/device.h"
#include "tests/temp_dir.h"

namespace {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

// The tally under test: $TALLY_BINARY when set (the relocatable bundle runs this test far
// from the build tree), else the one built beside it.
std::string TallyBinary() {
  const char* bin = std::getenv("TALLY_BINARY");
  return bin != nullptr && *bin != '\0' ? bin : TALLY_BINARY;
}

// Runs `tally args` (in `dir` when given) and collects its output.
CliRun Tally(const std::string& args, const std::string& dir = "") {
  std::string cmd = (dir.empty() ? "" : "cd " + dir + " && ") + TallyBinary() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const char* kSmall =
    "train --num-layers 8 --image-shape 3,12,12 --num-classes 4 --batch-size 16 "
    "--num-examples 128 --disp-batches 4 --num-epochs 2 --num-val-examples 32 --top-k 2";

// Boolean flags take their value as MXNet's scripts give it, after a space too.
TEST(TrainCli, BooleanFlagsTakeASeparateValue) {
  CliRun r = Tally(std::string(kSmall) + " --cuda-graph 0 --progress false --last-gamma 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Epoch[1] Train-accuracy="), std::string::npos) << r.output;
  r = Tally(std::string(kSmall) + " --progress maybe");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unexpected argument 'maybe'"), std::string::npos) << r.output;
}

TEST(TrainCli, PrintsMxnetSpeedometerLines) {
  CliRun r = Tally(kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  std::regex batch(R"(Epoch\[(\d+)\] Batch \[(\d+)-(\d+)\]\tSpeed: ([\d.]+) samples/sec\taccuracy=([\d.]+)\ttop_k_accuracy_2=([\d.]+))");
  ASSERT_TRUE(std::regex_search(r.output, m, batch)) << r.output;
  EXPECT_EQ(m[2], "0");
  EXPECT_EQ(m[3], "4");
  EXPECT_GT(std::stod(m[4]), 0.0);
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[1\] Batch \[4-8\]\tSpeed: )"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[(\d+)\] Train-accuracy=([\d.]+))"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[(\d+)\] Time cost=([\d.]+))"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[1\] Validation-accuracy=([\d.]+))"))) << r.output;
}

TEST(TrainCli, RefusesBadInputNamingTheFlag) {
  // A GPU this machine does not have: on one without GPUs, the first.
  const std::string missing_gpu = "--gpus " + std::to_string(tally::CudaDeviceCount());
  struct Case {
    std::string args;
    std::string expect;
  } cases[] = {
      {"--dtype float99", "--dtype"},
      {"--dtype float16", "--dtype"},
      {"--network vgg", "--network"},
      {"--num-layers 7", "--num-layers"},
      {"--image-shape 3,x,32", "--image-shape"},
      {"--image-shape 3,32", "--image-shape"},
      {"--batch-size 3 --cpu-devices 2", "--batch-size"},
      {"--kv-store banana", "--kv-store"},
      {"--optimizer adamax", "--optimizer"},
      {missing_gpu, "--gpus"},
      {"--no-such-flag 1", "no-such-flag"},
      {"--load-epoch 1", "--model-prefix"},
      {"--resume auto", "--model-prefix"},
      {"--resume yes --model-prefix /tmp/x", "--resume"},
      {"--resume auto --load-epoch 1 --model-prefix /tmp/x", "--load-epoch"},
      {"--save-period 0", "--save-period"},
      {"--load-epoch 5 --num-epochs 3 --model-prefix /tmp/x", "--num-epochs"},
      {"--load-epoch 1 --model-prefix /tmp/no/such/run/m", "/tmp/no/such/run/m-0001.params"},
      {"--model-prefix /proc/no/m", "--model-prefix"},
      {"--elastic-lr sqrt", "--elastic-lr sqrt: keep or linear"},
      {"--membership-replay /tmp/m.jsonl", "--membership-replay needs --elastic"},
      {"--elastic", "--elastic needs a dist_* --kv-store"},
      {"--data-train /no/such.rec --gpu-decode-buffers 7", "--gpu-decode-buffers 7: 2, 3 or 4"},
      {"--data-train /no/such.rec --gpu-decoder fast", "--gpu-decoder fast: hardware or cuda"},
      {"--data-train /no/such.rec --gpu-decode-tuning fast", "--gpu-decode-tuning: GPU decode tuning 'fast': unknown setting 'fast'"},
      {"--data-train /no/such.rec --gpu-decode-tuning threads=3", "threads=3: 3 decode threads need more than --gpu-decode-buffers 3"},
  };
  for (const Case& c : cases) {
    CliRun r = Tally("train " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << " said:\n" << r.output;
    EXPECT_EQ(r.output.find("Check failed"), std::string::npos) << c.args << " crashed:\n" << r.output;
  }
}

// Asking a machine without a GPU for one: the train and bench commands name the device and
// why it cannot be used, and crash on nothing.
TEST(TrainCli, GpuCommandsWithoutAGpuSayWhy) {
  if (tally::CudaDeviceCount() > 0) GTEST_SKIP() << "skipped: a GPU is present, so nothing is refused";
  const std::string reason = tally::BuiltWithCuda() ? "no CUDA device is visible" : "built without CUDA";
  for (const char* args : {"train --gpus 0 --dtype float16 --kv-store device",
                           "bench compute --gpu --peer=false"}) {
    CliRun r = Tally(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find("cuda:0: "), std::string::npos) << args << " said:\n" << r.output;
    EXPECT_NE(r.output.find(reason), std::string::npos) << args << " said:\n" << r.output;
    EXPECT_EQ(r.output.find("Check failed"), std::string::npos) << args << " crashed:\n" << r.output;
  }
}

// A pack made by the project's own tools: class-coloured JPEGs, listed and packed at 32 px.
TEST(TrainCli, TrainsAndValidatesFromARecordIOPack) {
  tally::ScopedTempDir tmp("train_cli_test");
  const std::string dir = tmp.path();
  auto run = [&](const std::string& args) { return Tally(args, dir); };
  ASSERT_EQ(run("make-data synthetic-jpeg --out imgs --classes 3 --per-class 12 --seed 2").exit_code, 0);
  ASSERT_EQ(run("im2rec data imgs --list --recursive").exit_code, 0);
  CliRun packed = run("im2rec data imgs --resize 32");
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  CliRun r = run("train --data-train data.rec --data-val data.rec --image-shape 3,32,32 --num-layers 8 "
                 "--num-classes 3 --batch-size 12 --num-epochs 2 --disp-batches 1 --random-crop 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[1\] Batch \[2-3\]\tSpeed: )"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[1\] Validation-accuracy=([\d.]+))"))) << r.output;

  r = run("train --data-train data.rec --image-shape 3,32,32 --num-layers 8 --num-classes 2 --batch-size 12");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--num-classes"), std::string::npos) << "labels 0..2 exceed 2 classes:\n" << r.output;
  r = run("train --data-train nowhere.rec --image-shape 3,32,32");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--data-train"), std::string::npos) << r.output;
}

// `tally CMD --help`: exit 0, the command's own flags one line each as they are typed, none
// of the logging library's and none of another command's.
TEST(TrainCli, HelpListsTheCommandsOwnFlags) {
  CliRun train = Tally("train --help");
  EXPECT_EQ(train.exit_code, 0) << train.output;
  for (const char* own : {"\n  --num-layers=20  ", "\n  --lr=0.1  ", "\n  --data-train=\"\"  ", "\n  --run-dir=\"\"  "}) {
    EXPECT_NE(train.output.find(own), std::string::npos) << own << " missing from\n" << train.output;
  }
  CliRun rec = Tally("rec -h");
  EXPECT_EQ(rec.exit_code, 0) << rec.output;
  EXPECT_NE(rec.output.find("\n  --verify=false  "), std::string::npos) << rec.output;
  for (const CliRun* r : {&train, &rec}) {
    for (const char* other : {"alsologtostderr", "logging.cc", "gflags", "--show-records"}) {
      if (r == &rec && std::string(other) == "--show-records") continue;  // rec's own
      EXPECT_EQ(r->output.find(other), std::string::npos) << other << " in\n" << r->output;
    }
  }
  EXPECT_EQ(rec.output.find("--num-layers"), std::string::npos) << rec.output;
}

TEST(TrainCli, UnknownCommandIsRefused) {
  CliRun r = Tally("trian");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown command 'trian'"), std::string::npos) << r.output;
}

TEST(TrainCli, FollowsALearningRateSchedule) {
  // 8 batches an epoch, 1 of 2 epochs of linear warm-up, then poly decay over 8 updates:
  // epoch 0 starts at 0.64 * 1/8, epoch 1 (one update into the decay) at 0.64 * (7/8)^2.
  CliRun r = Tally(std::string(kSmall) + " --lr 0.64 --lr-scheduler poly --warmup-epochs 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Epoch[0] lr=0.080000\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Epoch[1] lr=0.490000\n"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[1\] Batch \[4-8\]\tSpeed: )"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Epoch\[1\] Train-accuracy=([\d.]+))"))) << r.output;

  for (const char* bad : {"--lr-scheduler foo", "--warmup-strategy exp", "--lr-step-epochs 6,3", "--lr-batch-scale -1"}) {
    CliRun refused = Tally(std::string("train ") + bad);
    std::string flag(bad, std::string(bad).find(' '));
    EXPECT_NE(refused.exit_code, 0) << bad;
    EXPECT_NE(refused.output.find(flag), std::string::npos) << bad << " said:\n" << refused.output;
  }
}

}  // namespace
