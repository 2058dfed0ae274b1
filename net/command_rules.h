// Who may send what: the one table of which nodes may send each command to a node of each
// role (docs/wire.md, "Who may send what"). Authentication proves which member sent a
// message; this says whether that member may say it. Every node asks before acting.
//
//   Status why = CheckCommandSender(ids, wire::WORKER, msg.meta);
//   if (!why.ok()) {            // e.g. a worker's SHUTDOWN: only the scheduler sends it
//     LOG(WARNING) << "refused " << why.message();
//     return;                   // refused: counted, never applied
//   }
//
// The sender is msg.meta.sender_id(), which an authenticated transport has matched to the
// member the connection proved (a negative id is no member's: only REGISTER, sent before
// the node has an id, carries -1). The finer checks of a command's own fields (a worker's
// step, worker 0 alone for INIT, the lead alone for LOSS_SCALE) stay with the handler that
// knows them. A pure function.
#pragma once

#include <cstdint>
#include <string>

#include "net/node_ids.h"
#include "net/transport.h"

namespace tally {

// Ok when node meta.sender_id() may send meta.command() to a node of role `to`; otherwise
// InvalidArgument naming the command, the sender and who may send it.
Status CheckCommandSender(const NodeIds& ids, wire::Role to, const wire::Meta& meta);

// LOSS_SCALE (a joiner's loss scale, docs/wire.md) comes from a worker, and only from the
// one that leads the job just before the join: `teller`, which the joiner works out from its
// own membership view (MembershipView::JoinTeller); -1: nobody may. Ok when sender_id is
// that worker; otherwise InvalidArgument naming the sender and the teller.
Status CheckLossScaleTeller(const NodeIds& ids, int sender_id, int teller, int64_t step);

// "node 4 (worker 1)", "node -3 (no node of this job)": a sender as the logs name it.
std::string DescribeSender(const NodeIds& ids, int id);

// Fields of the scheduler's notices that name nodes: SERVER_LOST names a server and, when
// present, a spare; NODE_TABLE lists every node of the job; MEMBERSHIP its live workers
// (distinct, from a step >= 0) and MEMBERSHIP_PREPARE the one leaving. Ok for other commands.
Status CheckNoticeFields(const NodeIds& ids, const wire::Meta& meta);

// Whether a node logs its n-th refusal (counted from 1): the first 200, then one in 1000, so
// that a flood of refused messages cannot fill the disk. Every node's refusals follow it.
inline bool LogsRefusal(int64_t n) { return n <= 200 || n % 1000 == 0; }

}  // namespace tally
