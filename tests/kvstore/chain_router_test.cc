// ChainRouter (kvstore/chain_router.h): a chain is served by its first live holder, a lost
// server's chains by their next, a spare joins last (not under dist_async), and a lost
// server's requests are rerouted by chain or dropped (copies, requests of no chain, INIT).
#include "kvstore/chain_router.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

// Three servers, two workers, one spare: servers 0..2 are nodes 1..3, the spare (rank 3)
// node 6.
const NodeIds kIds{/*num_servers=*/3, /*num_workers=*/2, /*spare_servers=*/1};

ChainRouter Router(int replicas, bool spares_take_places = true) {
  return ChainRouter([] { return kIds; }, replicas, spares_take_places);
}

PendingRequest OfChain(wire::Command command, int chain) {
  PendingRequest p;
  p.command = command;
  p.chain = chain;
  return p;
}

TEST(ChainRouter, WithoutReplicasEachChainIsItsServer) {
  ChainRouter router = Router(0);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(router.Route(c), kIds.Server(c));
    EXPECT_EQ(router.Holders(c), std::vector<int>{c});
  }
  EXPECT_EQ(router.Route(3), kIds.Server(3));  // the spare's own requests
}

TEST(ChainRouter, ALostPrimarysChainsGoToTheirNextHolderAndTheSpareJoinsLast) {
  ChainRouter router = Router(1);
  EXPECT_EQ(router.Holders(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(router.Holders(2), (std::vector<int>{2, 0}));
  EXPECT_EQ(router.Lose(0, /*spare=*/3), (std::vector<int>{0, 2}));
  EXPECT_EQ(router.Route(0), kIds.Server(1));
  EXPECT_EQ(router.Holders(0), (std::vector<int>{1, 3}));
  EXPECT_EQ(router.Holders(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(router.Route(2), kIds.Server(2));  // its primary lives: unchanged
  EXPECT_EQ(router.Describe({0, 2}), "0 by server 1, 2 by server 2");
}

TEST(ChainRouter, UnderDistAsyncTheSpareTakesNoPlace) {
  ChainRouter router = Router(1, /*spares_take_places=*/false);
  router.Lose(0, /*spare=*/3);
  EXPECT_EQ(router.Holders(0), std::vector<int>{1});
}

TEST(ChainRouter, ALostServersRequestsGoByChainOrAreDropped) {
  ChainRouter router = Router(1);
  router.Lose(1, /*spare=*/-1);
  int node = kIds.Server(1);
  PendingRequest push = OfChain(wire::PUSH, 1);
  EXPECT_FALSE(router.Reroute(&push, &node));
  EXPECT_EQ(node, kIds.Server(2));
  PendingRequest rollback = OfChain(wire::ROLLBACK, 1);
  EXPECT_FALSE(router.Reroute(&rollback, &node));
  PendingRequest copy = OfChain(wire::PUSH, -1);
  copy.replica_copy = true;
  EXPECT_TRUE(router.Reroute(&copy, &node));
  PendingRequest no_chain = OfChain(wire::PULL, -1);
  EXPECT_TRUE(router.Reroute(&no_chain, &node));
  PendingRequest init = OfChain(wire::INIT, 1);
  EXPECT_TRUE(router.Reroute(&init, &node));
  // Every holder lost: the chain's own server (the scheduler ends the job).
  router.Lose(2, -1);
  EXPECT_EQ(router.Route(1), kIds.Server(1));
}

}  // namespace
}  // namespace tally
