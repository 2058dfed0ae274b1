#include "models/mxnet_names.h"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace tally {
namespace {

// A parameter of a Tally ResNet, taken apart: where it sits and which of its fields it is.
struct Place {
  enum Kind { kStemConv, kStemBn, kConv, kBn, kDownConv, kDownBn, kFc } kind;
  int stage = 0, block = 0, index = 0;  // layerS.B.convK / bnK: 1-based S and K, 0-based B
  std::string field;                    // weight, bias, running_mean, running_var
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

int Number(const std::string& s, size_t skip) { return std::stoi(s.substr(skip)); }

Place Locate(const std::string& name) {
  const std::vector<std::string> p = Split(name);
  Place where{};
  where.field = p.back();
  if (p[0] == "conv1") where.kind = Place::kStemConv;
  else if (p[0] == "bn1") where.kind = Place::kStemBn;
  else if (p[0] == "fc") where.kind = Place::kFc;
  else {
    CHECK(p.size() >= 4 && p[0].rfind("layer", 0) == 0) << "not a ResNet parameter: " << name;
    where.stage = Number(p[0], 5);
    where.block = std::stoi(p[1]);
    if (p[2] == "downsample") {
      where.kind = p[3] == "0" ? Place::kDownConv : Place::kDownBn;
    } else {
      where.kind = p[2].rfind("conv", 0) == 0 ? Place::kConv : Place::kBn;
      where.index = Number(p[2], p[2][0] == 'c' ? 4 : 2);
    }
  }
  return where;
}

bool IsStatistic(const std::string& field) { return field == "running_mean" || field == "running_var"; }

// A batch norm's field under Gluon's names (gamma, beta, running_mean, running_var) or
// MXNet symbol's (moving_mean, moving_var for the statistics).
std::string BnField(const std::string& field, bool symbol) {
  if (field == "weight") return "gamma";
  if (field == "bias") return "beta";
  if (symbol) return field == "running_mean" ? "moving_mean" : "moving_var";
  return field;
}

std::string ModuleName(const Place& w) {
  const std::string unit = "stage" + std::to_string(w.stage) + "_unit" + std::to_string(w.block + 1);
  std::string base;
  switch (w.kind) {
    case Place::kStemConv: base = "conv0_weight"; break;
    case Place::kStemBn: base = "bn0_" + BnField(w.field, true); break;
    case Place::kConv: base = unit + "_conv" + std::to_string(w.index) + "_weight"; break;
    case Place::kBn: base = unit + "_bn" + std::to_string(w.index) + "_" + BnField(w.field, true); break;
    case Place::kDownConv: base = unit + "_conv1sc_weight"; break;
    case Place::kDownBn: base = unit + "_sc_" + BnField(w.field, true); break;
    case Place::kFc: base = "fc1_" + w.field; break;
  }
  return (IsStatistic(w.field) ? "aux:" : "arg:") + base;
}

// Gluon's ResNetV1: features = [conv, bn, relu, maxpool, stage 1, ...], each block's body a
// sequence of (conv, bn, relu) with the last relu after the addition, so conv K sits at
// 3(K-1) and its bn right after.
std::string GluonV1Name(const Place& w) {
  const std::string block = "features." + std::to_string(3 + w.stage) + "." + std::to_string(w.block);
  switch (w.kind) {
    case Place::kStemConv: return "features.0.weight";
    case Place::kStemBn: return "features.1." + BnField(w.field, false);
    case Place::kConv: return block + ".body." + std::to_string(3 * (w.index - 1)) + ".weight";
    case Place::kBn: return block + ".body." + std::to_string(3 * (w.index - 1) + 1) + "." + BnField(w.field, false);
    case Place::kDownConv: return block + ".downsample.0.weight";
    case Place::kDownBn: return block + ".downsample.1." + BnField(w.field, false);
    case Place::kFc: return "output." + w.field;
  }
  return "";
}

// Gluon's bottleneck v1 gives its 1x1 convolutions a bias. A per-channel constant before a
// batch norm is the same as subtracting it from the running mean: in training the batch mean
// removes it, in inference the running mean does. The bias that precedes batch norm `bn`.
std::string GluonV1ConvBias(const Place& bn) {
  const std::string block = "features." + std::to_string(3 + bn.stage) + "." + std::to_string(bn.block);
  if (bn.kind == Place::kBn) return block + ".body." + std::to_string(3 * (bn.index - 1)) + ".bias";
  if (bn.kind == Place::kDownBn) return block + ".downsample.0.bias";
  return "features.0.bias";
}

// Subtracts the bias Gluon v1 puts before `name`'s batch norm, if any, from the running mean
// `mean`; records the bias as used.
Status FoldConvBias(const std::string& where, const std::string& name, const std::map<std::string, const Tensor*>& file,
                    Tensor* mean, std::set<std::string>* used) {
  const Place w = Locate(name);
  if (w.field != "running_mean") return Status::Ok();
  const std::string bias = GluonV1ConvBias(w);
  auto it = file.find(bias);
  if (it == file.end()) return Status::Ok();
  Tensor b = it->second->To(DType::kF32);
  if (b.shape() != mean->shape()) {
    return Status::InvalidArgument(where + ": '" + bias + "' has shape " + ShapeString(b.shape()) + ", not " +
                                   ShapeString(mean->shape()));
  }
  float* m = mean->data<float>();
  for (int64_t i = 0; i < b.numel(); ++i) m[i] -= b.data<float>()[i];
  used->insert(bias);
  return Status::Ok();
}

std::string GluonV1bName(const std::string& name, const Place& w) {
  if (w.kind != Place::kStemBn && w.kind != Place::kBn && w.kind != Place::kDownBn) return name;
  return name.substr(0, name.size() - w.field.size()) + BnField(w.field, false);
}

std::string StripRole(const std::string& name) {
  return name.rfind("arg:", 0) == 0 || name.rfind("aux:", 0) == 0 ? name.substr(4) : name;
}

std::string FirstFew(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 3) out += " and " + std::to_string(names.size() - 3) + " more";
  return out;
}

// Why a file with none of a scheme's names is not loadable, when its names say what it is.
std::string Recognise(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (n.rfind("bn_data_", 0) == 0) {
      return "; it is MXNet's pre-activation resnet (v2) symbol, which Tally does not have: MXNet's "
             "resnet-v1 symbol loads (--network resnet-v1)";
    }
    if (n.rfind("resnetv1", 0) == 0 || n.rfind("resnetv2", 0) == 0) {
      return "; these are Gluon's prefixed names of before MXNet 1.3: load the net in Gluon and "
             "save_parameters() to get structural names";
    }
  }
  return "";
}

}  // namespace

const char* MxnetSchemeName(MxnetScheme scheme) {
  switch (scheme) {
    case MxnetScheme::kModule: return "MXNet Module (resnet-v1 symbol)";
    case MxnetScheme::kGluonV1: return "Gluon resnet_v1";
    case MxnetScheme::kGluonV1b: return "GluonCV resnet_v1b";
  }
  return "?";
}

std::string MxnetName(const std::string& name, MxnetScheme scheme) {
  const Place w = Locate(name);
  switch (scheme) {
    case MxnetScheme::kModule: return ModuleName(w);
    case MxnetScheme::kGluonV1: return GluonV1Name(w);
    case MxnetScheme::kGluonV1b: return GluonV1bName(name, w);
  }
  return name;
}

bool TallyNameOfModuleName(const std::string& module_name, std::string* name) {
  const std::string m = StripRole(module_name);
  static const std::map<std::string, std::string> kBn = {
      {"gamma", "weight"}, {"beta", "bias"}, {"moving_mean", "running_mean"}, {"moving_var", "running_var"}};
  auto bn_field = [&](const std::string& tail, std::string* field) {
    auto it = kBn.find(tail);
    if (it == kBn.end()) return false;
    *field = it->second;
    return true;
  };
  std::string field;
  if (m == "conv0_weight") return *name = "conv1.weight", true;
  if (m == "fc1_weight" || m == "fc1_bias") return *name = "fc." + m.substr(4), true;
  if (m.rfind("bn0_", 0) == 0 && bn_field(m.substr(4), &field)) return *name = "bn1." + field, true;
  int stage = 0, unit = 0, used = 0;
  if (std::sscanf(m.c_str(), "stage%d_unit%d_%n", &stage, &unit, &used) != 2 || used == 0 || stage < 1 || unit < 1) {
    return false;
  }
  const std::string layer = "layer" + std::to_string(stage) + "." + std::to_string(unit - 1) + ".";
  const std::string rest = m.substr(used);
  int k = 0, more = 0;
  if (rest == "conv1sc_weight") return *name = layer + "downsample.0.weight", true;
  if (rest.rfind("sc_", 0) == 0 && bn_field(rest.substr(3), &field)) return *name = layer + "downsample.1." + field, true;
  if (std::sscanf(rest.c_str(), "conv%d_weight%n", &k, &more) == 1 && more == static_cast<int>(rest.size())) {
    return *name = layer + "conv" + std::to_string(k) + ".weight", true;
  }
  if (std::sscanf(rest.c_str(), "bn%d_%n", &k, &more) == 1 && more > 0 && bn_field(rest.substr(more), &field)) {
    return *name = layer + "bn" + std::to_string(k) + "." + field, true;
  }
  return false;
}

Tensor ToMxnetLayout(const Tensor& t) { return t.ndim() == 4 ? NhwcToNchw(t) : t; }
Tensor FromMxnetLayout(const Tensor& t) { return t.ndim() == 4 ? NchwToNhwc(t) : t; }

Status ImportMxnetWeights(const std::string& path, const std::vector<NamedTensor>& arrays,
                          const std::vector<Parameter*>& params, const ModelConfig& cfg,
                          const ImportOptions& options, ImportedWeights* out) {
  std::map<std::string, const Tensor*> file;  // without arg:/aux:
  std::vector<std::string> file_names;
  for (const NamedTensor& a : arrays) {
    if (a.name.rfind("tally:", 0) == 0) continue;
    if (a.name.empty()) return Status::InvalidArgument(path + ": holds an unnamed list of arrays, not parameters");
    file[StripRole(a.name)] = &a.tensor;
    file_names.push_back(StripRole(a.name));
  }
  // The scheme that names the most of the file's arrays.
  MxnetScheme best = MxnetScheme::kModule;
  size_t best_hits = 0;
  for (MxnetScheme s : {MxnetScheme::kModule, MxnetScheme::kGluonV1, MxnetScheme::kGluonV1b}) {
    size_t hits = 0;
    for (const Parameter* p : params) hits += file.count(StripRole(MxnetName(p->name, s)));
    if (hits > best_hits) best = s, best_hits = hits;
  }
  const std::string model = cfg.network + "-" + std::to_string(cfg.num_layers);
  if (best_hits == 0) {
    return Status::InvalidArgument(path + ": none of its " + std::to_string(file.size()) +
                                   " arrays is a " + model + " parameter under MXNet Module, Gluon v1 or "
                                   "GluonCV v1b names (it has " + FirstFew(file_names) + ")" +
                                   Recognise(file_names));
  }
  const std::string where = path + " (" + MxnetSchemeName(best) + " names)";
  ImportedWeights result;
  result.scheme = best;
  std::set<std::string> used;
  std::vector<std::string> missing;
  for (const Parameter* p : params) {
    const std::string theirs = StripRole(MxnetName(p->name, best));
    auto it = file.find(theirs);
    if (it == file.end()) {
      missing.push_back(theirs);
      continue;
    }
    used.insert(theirs);
    const Tensor& t = *it->second;
    if (!t.defined() || (t.dtype() != DType::kF32 && t.dtype() != DType::kF16 && t.dtype() != DType::kBF16)) {
      return Status::InvalidArgument(where + ": '" + theirs + "' is " + (t.defined() ? t.ToString() : "empty") +
                                     ", not floating point");
    }
    Tensor ours = FromMxnetLayout(t.To(DType::kF32));
    if (ours.shape() != p->value.shape()) {
      if (options.allow_new_classifier && p->name.rfind("fc.", 0) == 0) {
        result.left_initial.push_back(p->name);
        continue;
      }
      return Status::InvalidArgument(where + ": '" + theirs + "' has shape " + ShapeString(t.shape()) + ", a " +
                                     model + " with " + std::to_string(cfg.num_classes) + " classes has " +
                                     ShapeString(ToMxnetLayout(p->value).shape()) + " there (" + p->name + ")");
    }
    if (best == MxnetScheme::kGluonV1) TALLY_RETURN_IF_ERROR(FoldConvBias(where, p->name, file, &ours, &used));
    result.params.push_back({p->name, ours});
  }
  if (!missing.empty()) {
    return Status::InvalidArgument(where + ": lacks " + std::to_string(missing.size()) + " parameters of a " +
                                   model + ": " + FirstFew(missing));
  }
  std::vector<std::string> extra;
  for (const std::string& n : file_names) {
    if (!used.count(n)) extra.push_back(n);
  }
  if (!extra.empty()) {
    const bool shortcut = extra[0].find("stage1_unit1_") == 0 && extra[0].find("sc") != std::string::npos;
    return Status::InvalidArgument(where + ": has " + std::to_string(extra.size()) + " arrays a " + model +
                                   " does not: " + FirstFew(extra) +
                                   (shortcut ? " (MXNet's resnet-v1 symbol gives the first unit a projection "
                                               "shortcut at depths 18 and 34; Tally's, as torchvision's, has none)"
                                             : ""));
  }
  *out = std::move(result);
  return Status::Ok();
}

}  // namespace tally
