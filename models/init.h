// Deterministic random numbers and the weight initialisers of the ResNet family.
//
//   Status s = InitializeParameters("xavier", seed, net->Parameters());
//
// Draws come from ops/random.h (splitmix64, Box-Muller), not <random>, whose distributions
// are implementation-defined: a seed must give the same weights with every compiler and
// standard library.
//
// Initialisers, by parameter (recognised by name and rank):
//   conv weight [K, R, S, C]: fan_in = R*S*C, fan_out = K*R*S; fc weight [out, in]: fan_in =
//   in, fan_out = out. Both draw N(0, std^2) with
//     "xavier": MXNet's Xavier(rnd_type='gaussian', factor_type='in', magnitude=2):
//               std = sqrt(2 / fan_in)
//     "msra":   MXNet's MSRAPrelu() defaults (factor_type='avg', slope=0.25):
//               std = sqrt(magnitude / ((fan_in + fan_out) / 2)), magnitude = 2 / (1 + 0.25^2)
//   BN gamma ("*.weight", rank 1) 1; BN beta and fc bias ("*.bias") 0;
//   running_mean 0; running_var 1.
// Each parameter draws from its own stream, seeded from (seed, its position in the list), so
// a tensor's values do not depend on the sizes of those before it.
//   "none":   a worker joining a running job, whose trainable parameters the servers'
//             weights replace: the draws are skipped (those weights keep the zeros they
//             were made with) and every other parameter is set as above, since the pull
//             does not fill the running statistics. Not a --initializer choice.
// Thread-safety: InitializeParameters writes the tensors it is given.
#pragma once

#include <string>
#include <vector>

#include "models/network.h"
#include "base/status.h"

namespace tally {

inline constexpr const char* kNoDraws = "none";  // the joiner's "none" above

// Fills every parameter of `params` by the rules above. Fails, naming --initializer, for an
// unknown initializer name.
Status InitializeParameters(const std::string& initializer, uint64_t seed,
                            const std::vector<Parameter*>& params);

}  // namespace tally
