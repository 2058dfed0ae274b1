// NodeIds (net/node_ids.h): the job's id layout, and JobNames (net/transport.h) agreeing with it.
#include "net/node_ids.h"

#include <gtest/gtest.h>

#include "net/server_chains.h"
#include "net/transport.h"

namespace tally {
namespace {

TEST(NodeIds, SchedulerThenServersThenWorkers) {
  const NodeIds ids{/*num_servers=*/2, /*num_workers=*/3};
  EXPECT_EQ(ids.size(), 6);
  EXPECT_EQ(ids.Server(0), 1);
  EXPECT_EQ(ids.Server(1), 2);
  EXPECT_EQ(ids.Worker(0), 3);
  EXPECT_EQ(ids.Worker(2), 5);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ids.ServerRank(ids.Server(r)), r);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ids.WorkerRank(ids.Worker(r)), r);
  const bool server[] = {false, true, true, false, false, false, false};
  const bool worker[] = {false, false, false, true, true, true, false};
  for (int id = 0; id <= 6; ++id) {
    EXPECT_EQ(ids.IsServer(id), server[id]) << id;
    EXPECT_EQ(ids.IsWorker(id), worker[id]) << id;
  }
  EXPECT_FALSE(ids.IsServer(-1));
  EXPECT_FALSE(ids.IsWorker(-1));
}

TEST(NodeIds, JobNamesFollowTheLayout) {
  const JobNames job{2, 3};
  EXPECT_EQ(job.Of(kSchedulerId), "scheduler");
  EXPECT_EQ(job.Of(2), "server 1");
  EXPECT_EQ(job.Of(3), "worker 0");
  EXPECT_EQ(job.Of(5), "worker 2");
  EXPECT_EQ(job.Of(6), "");
  EXPECT_EQ(job.Of(-1), "");
  EXPECT_EQ(job.size(), 6);
}

TEST(NodeIds, SparesComeAfterTheWorkersAndNothingElseMoves) {
  const NodeIds ids{/*num_servers=*/2, /*num_workers=*/3, /*spare_servers=*/2};
  EXPECT_EQ(ids.size(), 8);
  EXPECT_EQ(ids.all_servers(), 4);
  EXPECT_EQ(ids.Server(1), 2);
  EXPECT_EQ(ids.Worker(0), 3);
  EXPECT_EQ(ids.Server(2), 6);
  EXPECT_EQ(ids.Server(3), 7);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ids.ServerRank(ids.Server(r)), r);
  const bool server[] = {false, true, true, false, false, false, true, true, false};
  for (int id = 0; id <= 8; ++id) {
    EXPECT_EQ(ids.IsServer(id), server[id]) << id;
    EXPECT_EQ(ids.IsWorker(id), id >= 3 && id <= 5) << id;
  }
  EXPECT_FALSE(ids.IsSpare(1));
  EXPECT_TRUE(ids.IsSpare(2));
  JobNames job{2, 3, 2};
  EXPECT_EQ(job.Of(6), "server 2");
  EXPECT_EQ(job.Of(7), "server 3");
  EXPECT_EQ(job.Of(8), "");
}

TEST(ServerChains, ALostServerLeavesAndItsSpareJoinsLast) {
  ServerChains chains(/*num_servers=*/3, /*replicas=*/1);
  EXPECT_EQ(chains.Holders(2), (std::vector<int>{2, 0}));
  chains.Lose(0, /*spare=*/3);
  EXPECT_EQ(chains.Holders(0), (std::vector<int>{1, 3}));  // 1 serves chain 0 now
  EXPECT_EQ(chains.Holders(1), (std::vector<int>{1, 2}));
  EXPECT_EQ(chains.Holders(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(chains.ChainsOf(3), (std::vector<int>{0, 2}));
  EXPECT_TRUE(chains.Lost(0));
  chains.Lose(0, 4);  // a notice seen twice changes nothing
  EXPECT_EQ(chains.Holders(0), (std::vector<int>{1, 3}));
  chains.Lose(1);
  EXPECT_EQ(chains.Holders(0), (std::vector<int>{3}));
  EXPECT_EQ(chains.Holders(1), (std::vector<int>{2}));
  chains.Lose(3);
  EXPECT_TRUE(chains.Holders(0).empty());
  EXPECT_TRUE(chains.ChainsOf(3).empty());
}

}  // namespace
}  // namespace tally
