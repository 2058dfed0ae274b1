// The optimizer's flags of `tally train` beyond --optimizer, --lr, --mom and --wd (defined
// with the other training flags): MXNet 1.9.1's optimizer parameters under their names
// (--beta1, --epsilon, --gamma1, --eta, ...), turned into an OptimizerConfig and checked.
//
//   OptimizerConfig opt;
//   TALLY_RETURN_IF_ERROR(OptimizerFromFlags(&opt));   // "--beta1 must be in [0, 1)"
#pragma once

#include "base/status.h"
#include "optim/optimizer_config.h"

namespace tally {

// Fills c's type, lr, momentum, wd and the rule's parameters from the flags; fails naming
// the flag whose value is out of range.
Status OptimizerFromFlags(OptimizerConfig* c);

}  // namespace tally
