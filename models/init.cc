#include "models/init.h"

#include <cmath>

namespace tally {
namespace {

constexpr double kPi = 3.14159265358979323846;

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

uint64_t SplitMix64Hash(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Next() {
  uint64_t out = SplitMix64Hash(state_);
  state_ += 0x9E3779B97F4A7C15ull;
  return out;
}

double SplitMix64::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double SplitMix64::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = 1.0 - Uniform();  // (0, 1]: the logarithm stays finite
  double u2 = Uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * kPi * u2);
  has_spare_ = true;
  return r * std::cos(2.0 * kPi * u2);
}

Status InitializeParameters(const std::string& initializer, uint64_t seed,
                            const std::vector<Parameter*>& params) {
  if (initializer != "xavier" && initializer != "msra") {
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
    } else {
      SplitMix64 rng(SplitMix64Hash(seed ^ SplitMix64Hash(i + 1)));
      double std = WeightStd(initializer, p->value.shape());
      for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(std * rng.Normal());
    }
  }
  return Status::Ok();
}

}  // namespace tally
