// The job's lead under --elastic (kvstore/membership_view.h): the lowest live rank at a step,
// which writes the checkpoints, and the worker that tells a joiner its loss scale (the lowest
// rank live on both sides of the join), through a history where worker 0 leaves, worker 2
// joins at the same step as worker 1 leaves, and worker 0 joins again.
#include "kvstore/membership_view.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

using Changes = std::vector<MembershipView::Membership>;

// 4 workers: 2 dies from 10; 0 dies from 20; 2 joins from 30 as 1 leaves there; 0 joins from 40.
Changes History() {
  return {{1, 10, {0, 1, 3}}, {2, 20, {1, 3}}, {3, 30, {3}}, {4, 30, {2, 3}}, {5, 40, {0, 2, 3}}};
}

TEST(MembershipLead, TheLeadIsTheLowestLiveRankAtTheStep) {
  const Changes c = History();
  EXPECT_EQ(MembershipView::LeadAt({}, 5, 4), 0) << "no change: worker 0";
  EXPECT_EQ(MembershipView::LeadAt(c, 0, 4), 0);
  EXPECT_EQ(MembershipView::LeadAt(c, 19, 4), 0);
  EXPECT_EQ(MembershipView::LeadAt(c, 20, 4), 1) << "worker 0 left from 20: the lead passes to 1";
  EXPECT_EQ(MembershipView::LeadAt(c, 29, 4), 1);
  EXPECT_EQ(MembershipView::LeadAt(c, 30, 4), 2) << "1 left and 2 joined at 30";
  EXPECT_EQ(MembershipView::LeadAt(c, 39, 4), 2);
  EXPECT_EQ(MembershipView::LeadAt(c, 40, 4), 0) << "worker 0 joined again: the lead is its from its step";
  EXPECT_EQ(MembershipView::LeadAt({{1, 3, {}}}, 3, 1), -1) << "nobody live";
}

TEST(MembershipLead, AJoinersLossScaleComesFromTheLowestRankLiveOnBothSidesOfItsJoin) {
  const Changes c = History();
  EXPECT_EQ(MembershipView::JoinEpoch(c, 2, 30, 4), 4);
  EXPECT_EQ(MembershipView::JoinEpoch(c, 0, 40, 4), 5);
  EXPECT_EQ(MembershipView::JoinEpoch(c, 0, 41, 4), -1) << "not a step it joined at";
  EXPECT_EQ(MembershipView::JoinEpoch(c, 3, 30, 4), -1) << "live all along";
  EXPECT_EQ(MembershipView::JoinTeller(c, 4, 4), 3) << "1 leaves at the same step: 3 settles 29 and goes on";
  EXPECT_EQ(MembershipView::JoinTeller(c, 5, 4), 2) << "worker 0 joining is told by the lead before it";
  EXPECT_EQ(MembershipView::JoinTeller(c, 9, 4), -1) << "no such change";
  EXPECT_EQ(MembershipView::JoinTeller({{1, 5, {1}}, {2, 9, {0, 1}}}, 2, 2), 1);
  EXPECT_EQ(MembershipView::JoinTeller({{1, 5, {1}}, {2, 9, {0}}}, 2, 2), -1) << "nobody on both sides";
}

}  // namespace
}  // namespace tally
