// Checkpoint files: round trips, the choice of the latest, and a writer killed at every
// stage of its commit never leaving the latest checkpoint unloadable.
#include "worker/checkpoint.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "ops/fault_hooks.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

// A small checkpoint whose values all derive from `tag`, so a mix of two is detectable.
Checkpoint Make(int64_t epoch, int64_t batch, float tag) {
  Checkpoint c;
  c.epoch = epoch;
  c.batch = batch;
  c.step = epoch * 100 + batch;
  Tensor w = Tensor::Empty({3, 2}, DType::kF32), b = Tensor::Empty({2}, DType::kF32);
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = tag + i;
  for (int i = 0; i < 2; ++i) b.data<float>()[i] = -tag - i;
  c.params = {{"fc.weight", w}, {"fc.bias", b}};
  Tensor m = Tensor::Empty({3, 2}, DType::kF32);
  for (int i = 0; i < 6; ++i) m.data<float>()[i] = tag * 10 + i;
  c.states = {{"fc.weight", m}};
  c.info = {{"network", "resnet"}, {"tag", std::to_string(tag)}};
  return c;
}

// The tag a loaded checkpoint was made with; fails the test if its files are mixed.
float TagOf(const Checkpoint& c) {
  EXPECT_EQ(c.params.size(), 2u);
  EXPECT_EQ(c.states.size(), 1u);
  const float tag = c.params[0].tensor.data<float>()[0];
  EXPECT_EQ(c.params[1].tensor.data<float>()[0], -tag);
  EXPECT_EQ(c.states[0].tensor.data<float>()[0], tag * 10) << "the .states belongs to another checkpoint";
  EXPECT_EQ(c.info.at("tag"), std::to_string(tag));
  EXPECT_EQ(c.step, c.epoch * 100 + c.batch);
  return tag;
}

TEST(Checkpoint, RoundTripsTensorsPositionAndInfo) {
  ScopedTempDir dir("checkpoint_test");
  const std::string prefix = dir.Path("m");
  ASSERT_TRUE(SaveCheckpoint(prefix, Make(3, 7, 5.0f)).ok());
  EXPECT_EQ(CheckpointPath(prefix, 3, ".params"), prefix + "-0003.params");
  struct stat st;
  EXPECT_EQ(stat((prefix + "-0003.states").c_str(), &st), 0);
  EXPECT_NE(stat((prefix + "-0003.states.prev").c_str(), &st), 0) << "the backup link outlived the commit";
  Checkpoint c;
  Status s = LoadCheckpoint(prefix, 3, &c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.epoch, 3);
  EXPECT_EQ(c.batch, 7);
  EXPECT_EQ(c.params[0].name, "fc.weight");
  EXPECT_EQ(c.params[0].tensor.shape(), (Shape{3, 2}));
  EXPECT_EQ(TagOf(c), 5.0f);
  EXPECT_EQ(c.info.count("format"), 0u) << "file bookkeeping leaked into info";
}

TEST(Checkpoint, LatestSkipsWhatDoesNotLoad) {
  ScopedTempDir dir("checkpoint_test");
  const std::string prefix = dir.Path("run");
  int64_t n = -1;
  EXPECT_EQ(LatestCheckpoint(prefix, &n).code(), Status::Code::kNotFound);
  ASSERT_TRUE(SaveCheckpoint(prefix, Make(1, 0, 1.0f)).ok());
  ASSERT_TRUE(SaveCheckpoint(prefix, Make(2, 0, 2.0f)).ok());
  ASSERT_TRUE(LatestCheckpoint(prefix, &n).ok());
  EXPECT_EQ(n, 2);
  // A truncated newest .params, and a stray file that only looks like a checkpoint.
  ASSERT_EQ(truncate((prefix + "-0002.params").c_str(), 20), 0);
  std::ofstream(prefix + "-00x3.params") << "not a checkpoint";
  ASSERT_TRUE(LatestCheckpoint(prefix, &n).ok());
  EXPECT_EQ(n, 1);
  Checkpoint c;
  Status s = LoadCheckpoint(prefix, 2, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(prefix + "-0002.params"), std::string::npos) << s;
}

TEST(Checkpoint, StatesOfAnotherCheckpointAreRefused) {
  ScopedTempDir dir("checkpoint_test");
  const std::string a = dir.Path("a"), b = dir.Path("b");
  ASSERT_TRUE(SaveCheckpoint(a, Make(1, 0, 1.0f)).ok());
  ASSERT_TRUE(SaveCheckpoint(b, Make(1, 0, 2.0f)).ok());
  ASSERT_EQ(std::rename((b + "-0001.states").c_str(), (a + "-0001.states").c_str()), 0);
  Checkpoint c;
  Status s = LoadCheckpoint(a, 1, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not belong"), std::string::npos) << s;
}

// A child process saves and is killed with SIGKILL after stage `stage` of the commit
// (FaultHooks::checkpoint_kill_at); returns whether it died that way.
bool SaveKilledAt(const std::string& prefix, const Checkpoint& c, int stage) {
  pid_t pid = fork();
  if (pid == 0) {
    FaultHooks hooks;
    hooks.checkpoint_kill_at = stage;
    SetFaultHooks(hooks);
    Status s = SaveCheckpoint(prefix, c);
    _exit(s.ok() ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

TEST(Checkpoint, AWriterKilledAtAnyStageLeavesTheLatestLoadable) {
  for (int stage = 1; stage <= 4; ++stage) {
    // Replacing checkpoint 2 (a SIGTERM save inside epoch 2 after epoch 1's end).
    ScopedTempDir dir("checkpoint_test");
    const std::string prefix = dir.Path("m");
    ASSERT_TRUE(SaveCheckpoint(prefix, Make(1, 0, 1.0f)).ok());
    ASSERT_TRUE(SaveCheckpoint(prefix, Make(2, 0, 2.0f)).ok());
    ASSERT_TRUE(SaveKilledAt(prefix, Make(2, 5, 3.0f), stage)) << "stage " << stage;
    int64_t n = -1;
    ASSERT_TRUE(LatestCheckpoint(prefix, &n).ok()) << "stage " << stage;
    EXPECT_EQ(n, 2) << "stage " << stage;
    Checkpoint c;
    Status s = LoadCheckpoint(prefix, 2, &c);
    ASSERT_TRUE(s.ok()) << "stage " << stage << ": " << s;
    const float tag = TagOf(c);
    // Before the .params is renamed the old checkpoint stands; after, the new one.
    EXPECT_EQ(tag, stage <= 3 ? 2.0f : 3.0f) << "stage " << stage;
    EXPECT_EQ(c.batch, stage <= 3 ? 0 : 5) << "stage " << stage;
    // The next save after a crash succeeds and cleans up.
    ASSERT_TRUE(SaveCheckpoint(prefix, Make(2, 9, 4.0f)).ok());
    ASSERT_TRUE(LoadCheckpoint(prefix, 2, &c).ok());
    EXPECT_EQ(TagOf(c), 4.0f);

    // A new number: until its .params lands, the previous number is the latest.
    ASSERT_TRUE(SaveKilledAt(prefix, Make(3, 0, 5.0f), stage)) << "stage " << stage;
    ASSERT_TRUE(LatestCheckpoint(prefix, &n).ok());
    EXPECT_EQ(n, stage <= 3 ? 2 : 3) << "stage " << stage;
    ASSERT_TRUE(LoadCheckpoint(prefix, n, &c).ok());
    EXPECT_EQ(TagOf(c), stage <= 3 ? 4.0f : 5.0f);
  }
}

}  // namespace
}  // namespace tally
