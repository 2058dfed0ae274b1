// NodeIds (net/node_ids.h): the job's id layout, and JobNames (net/transport.h) agreeing with it.
#include "net/node_ids.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tally
