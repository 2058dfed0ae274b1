#include "models/init.h"

#include <cmath>

#include "ops/random.h"

namespace tally {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Standard deviation of a weight's normal distribution; shape is [K, R, S, C] or [out, in].
double WeightStd(const std::string& initializer, const Shape& shape) {
  int64_t receptive = 1;
  for (size_t i = 1; i + 1 < shape.size(); ++i) receptive *= shape[i];
  double fan_in = static_cast<double>(shape.back() * receptive);
  double fan_out = static_cast<double>(shape.front() * receptive);
  if (initializer == "xavier") return std::sqrt(2.0 / fan_in);
  double slope = 0.25;
  double magnitude = 2.0 / (1.0 + slope * slope);
  return std::sqrt(magnitude / ((fan_in + fan_out) / 2.0));
}

}  // namespace

Status InitializeParameters(const std::string& initializer, uint64_t seed,
                            const std::vector<Parameter*>& params) {
  const bool draws = initializer != kNoDraws;
  if (draws && initializer != "xavier" && initializer != "msra") {
    return Status::InvalidArgument("--initializer: unknown initializer '" + initializer +
                                   "' (expected xavier or msra)");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter* p = params[i];
    float* v = p->value.data<float>();
    int64_t n = p->value.numel();
    if (EndsWith(p->name, ".running_var")) {
      p->value.Fill(1.0f);
    } else if (EndsWith(p->name, ".running_mean") || EndsWith(p->name, ".bias")) {
      p->value.Fill(0.0f);
    } else if (p->value.ndim() == 1) {
      p->value.Fill(1.0f);  // BN gamma
    } else if (!draws && p->trainable) {
      continue;  // the pulled weights replace it (a joiner)
    } else {
      Rng rng(SplitMix64Hash(seed ^ SplitMix64Hash(i + 1)));
      const float std = static_cast<float>(WeightStd(initializer, p->value.shape()));
      for (int64_t j = 0; j < n; ++j) v[j] = std * rng.Normal();
    }
  }
  return Status::Ok();
}

}  // namespace tally
