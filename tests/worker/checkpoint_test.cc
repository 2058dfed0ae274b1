// Checkpoint files: round trips, the choice of the latest, and a writer killed at every
// stage of its commit never leaving the latest checkpoint unloadable.
#include "worker/checkpoint.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "models/ndarray_file.h"
#include "base/fault_hooks.h"
#include "data/elastic_reader.h"
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

// --elastic's data position (the `membership` metadata, docs/checkpoint.md) comes back as
// written, from the .params and the .states alike, and parses to the same record.
TEST(Checkpoint, KeepsAnElasticRunsDataPosition) {
  ScopedTempDir dir("checkpoint_test");
  const std::string prefix = dir.Path("m");
  ElasticRecord record;
  record.num_examples = 960;
  record.epoch_live = {0, 1, 2};
  record.changes = {{35, {0, 2}, false}, {40, {0, 1, 2}, true}};
  Checkpoint c = Make(0, 12, 2.0f);
  c.info["membership"] = record.ToJson();
  ASSERT_TRUE(SaveCheckpoint(prefix, c).ok());
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(prefix, 0, &back).ok());
  ASSERT_EQ(back.info.count("membership"), 1u);
  ElasticRecord parsed;
  ASSERT_TRUE(ElasticRecord::FromJson("m-0000.params", back.info.at("membership"), &parsed).ok());
  EXPECT_EQ(parsed.ToJson(), record.ToJson());
  EXPECT_EQ(parsed.changes[0].live, (std::vector<int>{0, 2}));
  // A checkpoint without it (not --elastic, or older) loads as before.
  ASSERT_TRUE(SaveCheckpoint(prefix, Make(1, 0, 3.0f)).ok());
  ASSERT_TRUE(LoadCheckpoint(prefix, 1, &back).ok());
  EXPECT_EQ(back.info.count("membership"), 0u);
}

// The .params is MXNet's NDArray file under Module names, its metadata an array MXNet's
// load_checkpoint passes over; the .states stays safetensors.
TEST(Checkpoint, ParamsAreAnMxnetNDArrayFile) {
  ScopedTempDir dir("checkpoint_test");
  const std::string prefix = dir.Path("m");
  Checkpoint c = Make(2, 0, 3.0f);
  Tensor conv = Tensor::Empty({4, 3, 3, 2}, DType::kF32);  // [K, R, S, C]
  for (int i = 0; i < 72; ++i) conv.data<float>()[i] = static_cast<float>(i);
  c.params.push_back({"conv1.weight", conv});
  ASSERT_TRUE(SaveCheckpoint(prefix, c).ok());
  NDArrayFile f;
  ASSERT_TRUE(ReadNDArrayFile(prefix + "-0002.params", &f).ok());
  ASSERT_EQ(f.arrays.size(), 4u);
  EXPECT_EQ(f.arrays[0].name, "arg:fc1_weight");
  EXPECT_EQ(f.arrays[1].name, "arg:fc1_bias");
  EXPECT_EQ(f.arrays[2].name, "arg:conv0_weight");
  const Tensor& oihw = f.arrays[2].tensor;
  ASSERT_EQ(oihw.shape(), (Shape{4, 2, 3, 3}));
  // [k=1, c=1, r=2, s=0] is [k=1, r=2, s=0, c=1] of Tally's: 1*18 + 2*6 + 0*2 + 1.
  EXPECT_EQ(oihw.data<float>()[1 * 18 + 1 * 9 + 2 * 3 + 0], 31.0f);
  EXPECT_EQ(f.arrays[3].name, "tally:metadata");
  const std::string meta(static_cast<const char*>(f.arrays[3].tensor.raw_data()), f.arrays[3].tensor.nbytes());
  EXPECT_NE(meta.find("\"format\":\"tally-params\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"version\":\"2\""), std::string::npos) << meta;
  SafetensorsFile states;
  ASSERT_TRUE(ReadSafetensors(prefix + "-0002.states", &states).ok());
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(prefix, 2, &back).ok());
  ASSERT_EQ(back.params.size(), 3u);
  EXPECT_EQ(back.params[2].name, "conv1.weight");
  EXPECT_EQ(std::memcmp(back.params[2].tensor.raw_data(), conv.raw_data(), conv.nbytes()), 0);
}

// Checkpoints written before the .params became an NDArray file (version 1, safetensors)
// still resume; an MXNet checkpoint of MXNet's own is named as such.
TEST(Checkpoint, ReadsVersionOneAndNamesMxnetsOwn) {
  ScopedTempDir dir("checkpoint_test");
  const std::string prefix = dir.Path("old");
  const Checkpoint c = Make(1, 4, 2.0f);
  ASSERT_TRUE(SaveCheckpoint(prefix, c).ok());
  std::map<std::string, std::string> meta;
  std::vector<NamedTensor> params;
  bool foreign = true;
  ASSERT_TRUE(ReadParamsFile(prefix + "-0001.params", &params, &meta, &foreign).ok());
  EXPECT_FALSE(foreign);
  meta["version"] = "1";
  ASSERT_TRUE(WriteSafetensors(prefix + "-0001.params", c.params, meta).ok());
  Checkpoint back;
  Status s = LoadCheckpoint(prefix, 1, &back);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(TagOf(back), 2.0f);

  ASSERT_TRUE(WriteNDArrayFile(prefix + "-0001.params", {{"arg:fc1_weight", c.params[0].tensor}}).ok());
  s = LoadCheckpoint(prefix, 1, &back);
  EXPECT_NE(s.message().find("an MXNet checkpoint without Tally's metadata"), std::string::npos) << s;
  ASSERT_TRUE(ReadParamsFile(prefix + "-0001.params", &params, &meta, &foreign).ok());
  EXPECT_TRUE(foreign);
  EXPECT_EQ(params[0].name, "arg:fc1_weight");
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
