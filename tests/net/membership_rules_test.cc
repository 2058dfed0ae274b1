// Who may send the elastic workers' commands (net/command_rules.h): LEAVE from a worker to
// the scheduler, MEMBERSHIP_PREPARE and MEMBERSHIP from the scheduler alone,
// MEMBERSHIP_REPORT from a server to the scheduler; and the workers a MEMBERSHIP names.
#include <gtest/gtest.h>

#include "net/command_rules.h"

namespace tally {
namespace {

const NodeIds kIds{/*num_servers=*/2, /*num_workers=*/3};  // servers 1-2, workers 3-5

bool Allowed(wire::Role to, wire::Command command, int sender) {
  wire::Meta m;
  m.set_command(command);
  m.set_sender_id(sender);
  return CheckCommandSender(kIds, to, m).ok();
}

wire::Meta Membership(wire::Command c, const std::vector<std::pair<wire::Role, int>>& nodes, int64_t step = 5) {
  wire::Meta m;
  m.set_command(c);
  m.set_step(step);
  for (const auto& [role, rank] : nodes) {
    wire::Node* n = m.add_nodes();
    n->set_role(role);
    n->set_rank(rank);
  }
  return m;
}

TEST(MembershipRules, EachCommandHasItsOneKindOfSender) {
  EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::LEAVE, kIds.Worker(1)));
  EXPECT_FALSE(Allowed(wire::SCHEDULER, wire::LEAVE, kIds.Server(0)));
  EXPECT_FALSE(Allowed(wire::SERVER, wire::LEAVE, kIds.Worker(1)));
  EXPECT_TRUE(Allowed(wire::SERVER, wire::MEMBERSHIP_PREPARE, kSchedulerId));
  EXPECT_FALSE(Allowed(wire::SERVER, wire::MEMBERSHIP_PREPARE, kIds.Worker(0)));
  EXPECT_FALSE(Allowed(wire::WORKER, wire::MEMBERSHIP_PREPARE, kSchedulerId));
  EXPECT_TRUE(Allowed(wire::SCHEDULER, wire::MEMBERSHIP_REPORT, kIds.Server(1)));
  EXPECT_FALSE(Allowed(wire::SCHEDULER, wire::MEMBERSHIP_REPORT, kIds.Worker(0)));
  for (wire::Role to : {wire::SERVER, wire::WORKER}) {
    EXPECT_TRUE(Allowed(to, wire::MEMBERSHIP, kSchedulerId));
    EXPECT_FALSE(Allowed(to, wire::MEMBERSHIP, kIds.Worker(0)));
    EXPECT_FALSE(Allowed(to, wire::MEMBERSHIP, kIds.Server(0)));
  }
}

// A joiner's loss scale comes from a worker, and of the workers only from the lead before the
// join (the teller, MembershipView::JoinTeller), which the joiner checks against its view:
// worker 1 once worker 0 left, worker 0 while it is live; nobody when there is no teller.
TEST(MembershipRules, OnlyTheLeadBeforeAJoinTellsTheJoinerItsLossScale) {
  EXPECT_TRUE(Allowed(wire::WORKER, wire::LOSS_SCALE, kIds.Worker(0)));
  EXPECT_TRUE(Allowed(wire::WORKER, wire::LOSS_SCALE, kIds.Worker(1)));
  EXPECT_FALSE(Allowed(wire::WORKER, wire::LOSS_SCALE, kIds.Server(0)));
  EXPECT_FALSE(Allowed(wire::WORKER, wire::LOSS_SCALE, kSchedulerId));
  EXPECT_FALSE(Allowed(wire::SERVER, wire::LOSS_SCALE, kIds.Worker(0)));
  EXPECT_FALSE(Allowed(wire::SCHEDULER, wire::LOSS_SCALE, kIds.Worker(0)));
  EXPECT_TRUE(CheckLossScaleTeller(kIds, kIds.Worker(0), /*teller=*/0, 30).ok());
  EXPECT_FALSE(CheckLossScaleTeller(kIds, kIds.Worker(1), /*teller=*/0, 30).ok());
  EXPECT_TRUE(CheckLossScaleTeller(kIds, kIds.Worker(1), /*teller=*/1, 30).ok());
  const Status zero = CheckLossScaleTeller(kIds, kIds.Worker(0), /*teller=*/1, 30);
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("only the lead before that join, worker 1"), std::string::npos) << zero.message();
  EXPECT_FALSE(CheckLossScaleTeller(kIds, kIds.Server(0), /*teller=*/1, 30).ok());
  EXPECT_FALSE(CheckLossScaleTeller(kIds, kIds.Worker(0), /*teller=*/-1, 30).ok());
  EXPECT_FALSE(CheckLossScaleTeller(kIds, -1, /*teller=*/1, 30).ok());
}

TEST(MembershipRules, AMembershipNamesDistinctWorkersOfTheJob) {
  EXPECT_TRUE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {{wire::WORKER, 0}, {wire::WORKER, 2}})).ok());
  EXPECT_FALSE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {})).ok());
  EXPECT_FALSE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {{wire::WORKER, 0}, {wire::WORKER, 0}})).ok());
  EXPECT_FALSE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {{wire::SERVER, 0}})).ok());
  EXPECT_FALSE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {{wire::WORKER, 3}})).ok());
  EXPECT_FALSE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {{wire::WORKER, -1}})).ok());
  EXPECT_FALSE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP, {{wire::WORKER, 0}}, /*step=*/-1)).ok());
  EXPECT_TRUE(CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP_PREPARE, {{wire::WORKER, 2}})).ok());
  EXPECT_FALSE(
      CheckNoticeFields(kIds, Membership(wire::MEMBERSHIP_PREPARE, {{wire::WORKER, 1}, {wire::WORKER, 2}})).ok());
}

}  // namespace
}  // namespace tally
