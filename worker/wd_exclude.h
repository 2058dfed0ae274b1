// --wd-exclude: the parameters trained without weight decay, chosen by what they are, as
// MXNet gives them wd_mult 0 by name (its optimizers' set_wd_mult; MLPerf's ResNet-50 keeps
// weight decay off batch-norm gamma and beta and off biases).
//
//   WdExclude exclude;
//   TALLY_RETURN_IF_ERROR(ParseWdExclude("bn,bias", &exclude));   // from the flag
//   opt.no_wd_keys = NoWdKeys(net->Parameters(), exclude);       // keys = parameter indices
//
// A batch-norm parameter is the weight (gamma) or bias (beta) of a layer that keeps a
// running_mean beside them ("layer1.0.bn1.weight", "layer1.0.downsample.1.bias"); a bias is
// any other trainable "*.bias" ("fc.bias"). Plain values and pure functions.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/network.h"

namespace tally {

struct WdExclude {
  bool bn = false;    // batch-norm gamma and beta
  bool bias = false;  // biases of other layers
};

// Parses a comma-separated list of bn and bias ("" : nothing excluded); the message names
// --wd-exclude.
Status ParseWdExclude(const std::string& text, WdExclude* out);

// The indices into params of the trainable parameters that exclude names.
std::set<int> NoWdKeys(const std::vector<Parameter*>& params, const WdExclude& exclude);

}  // namespace tally
