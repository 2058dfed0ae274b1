#include "worker/wd_exclude.h"

namespace tally {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "layer1.0.bn1.weight" -> "layer1.0.bn1"; "" when the name has no dot.
std::string Owner(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

Status ParseWdExclude(const std::string& text, WdExclude* out) {
  *out = WdExclude();
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item == "bn") {
      out->bn = true;
    } else if (item == "bias") {
      out->bias = true;
    } else {
      return Status::InvalidArgument("--wd-exclude " + text + ": '" + item +
                                     "' is not one of bn, bias (a comma-separated list, such as bn,bias)");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
    if (start == text.size()) return Status::InvalidArgument("--wd-exclude " + text + " ends with a comma");
  }
  return Status::Ok();
}

std::set<int> NoWdKeys(const std::vector<Parameter*>& params, const WdExclude& exclude) {
  // Batch-norm layers are the owners of a running mean.
  std::set<std::string> bn_layers;
  for (const Parameter* p : params) {
    if (EndsWith(p->name, ".running_mean")) bn_layers.insert(Owner(p->name));
  }
  std::set<int> keys;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = *params[i];
    if (!p.trainable) continue;
    const bool bn = bn_layers.count(Owner(p.name)) != 0;
    if ((bn && exclude.bn) || (!bn && exclude.bias && EndsWith(p.name, ".bias"))) keys.insert(static_cast<int>(i));
  }
  return keys;
}

}  // namespace tally
