// ElasticMembership (scheduler/membership.h): the step a leave starts from, decided from the
// servers' reports; the step skipped everywhere when the leaver's push of it reached some
// slices only; replays; and membership.jsonl.
#include "scheduler/membership.h"

#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace tally {
namespace {

TEST(ElasticMembership, TheChangeStartsAfterTheLastStepCountingTheLeaverEverywhere) {
  ScopedTempDir dir("membership_test");
  const std::string log = dir.Path("membership.jsonl");
  ElasticMembership m(4, log);
  m.Queue(2, "worker 2 stopped answering");
  m.Queue(2, "again");  // queued once
  int rank = -1;
  ASSERT_TRUE(m.Start(&rank));
  EXPECT_EQ(rank, 2);
  EXPECT_FALSE(m.Start(&rank));  // one change at a time
  m.Expect({1, 2});
  // Server 1 has the leaver's push of step 30 waiting on every slice; server 2 on none.
  EXPECT_FALSE(m.Report(1, 1, /*through=*/30, /*applied=*/29));
  EXPECT_FALSE(m.Report(1, /*epoch=*/2, 29, 29));  // another change's report: not counted
  EXPECT_TRUE(m.Report(2, 1, 29, 29));
  int64_t from = -1, skip = 0;
  ASSERT_TRUE(m.Decide(&from, &skip).ok());
  EXPECT_EQ(from, 30);
  EXPECT_EQ(skip, -1);
  EXPECT_EQ(m.epoch(), 1);
  EXPECT_EQ(m.live(), (std::set<int>{0, 1, 3}));
  EXPECT_FALSE(m.Start(&rank));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "{\"epoch\": 1, \"from_step\": 30, \"left\": [2], \"live\": [0, 1, 3], "
                        "\"why\": \"worker 2 stopped answering\"}\n");
}

TEST(ElasticMembership, AStepAppliedWithThePushSomewhereAndLackingItElsewhereIsSkippedEverywhere) {
  ScopedTempDir dir("membership_test");
  ElasticMembership m(3, dir.Path("membership.jsonl"));
  m.Queue(1, "worker 1 stopped answering");
  int rank;
  ASSERT_TRUE(m.Start(&rank));
  m.Expect({1, 2});
  m.Report(1, 1, /*through=*/8, /*applied=*/8);  // step 8 applied with worker 1's push
  m.Report(2, 1, /*through=*/7, /*applied=*/7);  // worker 1's push of step 8 never came
  int64_t from, skip;
  ASSERT_TRUE(m.Decide(&from, &skip).ok());
  EXPECT_EQ(from, 8);
  EXPECT_EQ(skip, 8);
  std::ifstream in(dir.Path("membership.jsonl"));
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("\"from_step\": 8, \"skip_step\": 8, \"left\": [1]"), std::string::npos) << line;
}

TEST(ElasticMembership, AReplayTakesTheRecordedSkipAndTwoStepsApartIsABrokenInvariant) {
  ElasticMembership replay(3, "");
  replay.Replay({{1, {8, 8}}});
  replay.Queue(1, "left");
  int rank;
  ASSERT_TRUE(replay.Start(&rank));
  replay.Expect({1});
  replay.Report(1, 1, /*through=*/7, /*applied=*/7);  // a clean leave before step 8
  int64_t from, skip;
  ASSERT_TRUE(replay.Decide(&from, &skip).ok());
  EXPECT_EQ(from, 8);
  EXPECT_EQ(skip, 8);
  ElasticMembership m(3, "");
  m.Queue(1, "left");
  ASSERT_TRUE(m.Start(&rank));
  m.Expect({1, 2});
  m.Report(1, 1, 9, 9);
  m.Report(2, 1, 7, 7);
  EXPECT_FALSE(m.Decide(&from, &skip).ok());
}

TEST(ElasticMembership, AServerLostMeanwhileIsNotWaitedForAndAsyncStartsAfterTheLastStep) {
  ElasticMembership m(2, "");
  m.Queue(1, "left");
  int rank;
  ASSERT_TRUE(m.Start(&rank));
  m.Expect({1, 2});
  EXPECT_FALSE(m.Report(1, 1, std::numeric_limits<int64_t>::max(), 41));  // dist_async: no slice counts
  EXPECT_TRUE(m.Lost(2));
  int64_t from, skip;
  ASSERT_TRUE(m.Decide(&from, &skip).ok());
  EXPECT_EQ(from, 42);
  EXPECT_EQ(skip, -1);
}

TEST(ElasticMembership, TheLastLiveWorkerCannotLeave) {
  ElasticMembership m(1, "");
  m.Queue(0, "left");
  int rank;
  ASSERT_TRUE(m.Start(&rank));
  m.Expect({1});
  ASSERT_TRUE(m.Report(1, 1, 3, 3));
  int64_t from, skip;
  EXPECT_FALSE(m.Decide(&from, &skip).ok());
}

TEST(ElasticMembership, AJoinStartsTwoStepsAfterTheNewestAppliedAndIsLoggedAsJoined) {
  ScopedTempDir dir("membership_test");
  const std::string log = dir.Path("membership.jsonl");
  ElasticMembership m(4, log);
  m.QueueJoin(2, "worker 2 is live");  // ignored
  int rank = -1;
  EXPECT_FALSE(m.Start(&rank));
  m.Queue(2, "worker 2 stopped answering");
  ASSERT_TRUE(m.Start(&rank));
  EXPECT_FALSE(m.joining());
  m.QueueJoin(2, "too early");  // still leaving: ignored
  EXPECT_TRUE(m.Pending(2));
  m.Expect({1});
  ASSERT_TRUE(m.Report(1, 1, 29, 29));
  int64_t from = -1, skip = 0;
  ASSERT_TRUE(m.Decide(&from, &skip).ok());
  EXPECT_FALSE(m.Start(&rank));
  m.QueueJoin(2, "worker 2 joined");
  m.QueueJoin(2, "again");  // queued once
  ASSERT_TRUE(m.Start(&rank));
  EXPECT_EQ(rank, 2);
  EXPECT_TRUE(m.joining());
  m.Expect({1, 2});
  // A slice of server 1 applied step 69, server 2's are at 68: the workers' pushes reach
  // step 70 at most, so 71 is the first step nobody pushed.
  EXPECT_FALSE(m.Report(1, 2, /*through=*/40, /*applied=*/69));
  EXPECT_TRUE(m.Report(2, 2, 40, 68));
  ASSERT_TRUE(m.Decide(&from, &skip).ok());
  EXPECT_EQ(from, 71);
  EXPECT_EQ(skip, -1);
  EXPECT_FALSE(m.joining());
  EXPECT_EQ(m.epoch(), 2);
  EXPECT_EQ(m.live(), (std::set<int>{0, 1, 2, 3}));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("{\"epoch\": 2, \"from_step\": 71, \"joined\": [2], \"live\": [0, 1, 2, 3], "
                            "\"why\": \"worker 2 joined\"}\n"),
            std::string::npos)
      << text.str();
}

TEST(ElasticMembership, AReplayedJoinStartsAtTheRecordedStepAndAsyncRightAfterTheNewest) {
  for (bool async : {false, true}) {
    ElasticMembership m(3, "");
    m.Replay({{2, {80, -1}}});
    m.Queue(1, "worker 1 left");
    int rank;
    ASSERT_TRUE(m.Start(&rank));
    m.Expect({1});
    const int64_t none = std::numeric_limits<int64_t>::max();
    ASSERT_TRUE(m.Report(1, 1, async ? none : 9, 9));
    int64_t from, skip;
    ASSERT_TRUE(m.Decide(&from, &skip).ok());
    m.QueueJoin(1, "worker 1 joined");
    ASSERT_TRUE(m.Start(&rank));
    m.Expect({1});
    ASSERT_TRUE(m.Report(1, 2, async ? none : 9, 50));
    ASSERT_TRUE(m.Decide(&from, &skip).ok());
    EXPECT_EQ(from, 80) << "the recorded step, later than the one decided";
    m.Replay({});
    m.Queue(1, "worker 1 left again");
    ASSERT_TRUE(m.Start(&rank));
    m.Expect({1});
    ASSERT_TRUE(m.Report(1, 3, async ? none : 90, 90));
    ASSERT_TRUE(m.Decide(&from, &skip).ok());
    m.QueueJoin(1, "worker 1 joined again");
    ASSERT_TRUE(m.Start(&rank));
    m.Expect({1});
    ASSERT_TRUE(m.Report(1, 4, async ? none : 90, 95));
    ASSERT_TRUE(m.Decide(&from, &skip).ok());
    EXPECT_EQ(from, async ? 96 : 97);
  }
}

}  // namespace
}  // namespace tally
