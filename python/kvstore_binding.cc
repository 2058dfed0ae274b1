// _tally.KVStore: one KVStore (kvstore/kvstore.h) and, for the distributed types, the
// Cluster this process joined as a worker. tally/kv.py wraps it; this side checks every
// key and array, converts them without copying, and releases the GIL around each call into
// the store (any of them may wait on the network).
//
// Calls take flat lists: keys [k0, k1, ...] and values [k0's device 0, k0's device 1, ...,
// k1's device 0, ...], num_devices per key, so that a ResNet-50 step crosses into C++ once.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "kvstore/kvstore.h"
#include "net/cluster.h"
#include "python/bindings.h"

namespace tally {
namespace python {
namespace {

// How long close() waits for the scheduler to end the job (every worker must finish).
constexpr int kFinishTimeoutMs = 600000;

class PyKVStore {
 public:
  PyKVStore(const std::string& type, int num_devices);
  ~PyKVStore() { TearDown(); }

  std::string type() const { return KVStoreTypeName(Store()->type()); }
  int rank() const { return Store()->rank(); }
  int num_workers() const { return Store()->num_workers(); }
  // --elastic: (epoch, from_step, live ranks) as last heard, and the workers the last pull summed.
  py::tuple membership() const {
    const MembershipView::Membership m = Store()->membership_view()->membership();
    return py::make_tuple(m.epoch, m.from_step, m.live);
  }
  // Every change heard of, by epoch, as [(epoch, from_step, live ranks)]: it first waits for
  // each MEMBERSHIP a server's answer so far was decided under (MembershipView), so that
  // after a pull it holds every change that pull's sums follow.
  py::list heard_membership();
  int summed_workers() const { return Store()->membership_view()->summed_workers(); }
  // A worker that joined a running --elastic job (TALLY_JOIN=1): its init receives the job's
  // values, and its first push is the job's step first_step (0 for the others).
  bool joined() const { return cluster_ != nullptr && cluster_->joined_after_epoch() > 0; }
  // A joiner: the last change before its own join (0 elsewhere).
  int64_t joined_after_epoch() const { return cluster_ == nullptr ? 0 : cluster_->joined_after_epoch(); }
  int64_t first_step() const { return Store()->membership_view()->first_step(); }
  int num_devices() const { return num_devices_; }
  bool closed() const { return kv_ == nullptr; }
  std::vector<int> keys() const;
  int64_t key_size(int key) const { return Numel(key, "size"); }

  void Barrier();
  void SetOptimizer(const OptimizerConfig& config);
  void SetGradientCompression(const std::string& type, float threshold);
  void SetLearningRate(float lr) { Store()->SetLearningRate(lr); }
  void Init(const std::vector<int>& keys, const py::list& values);
  void Push(const std::vector<int>& keys, const py::list& values, int priority);
  void Pull(const std::vector<int>& keys, const py::list& outs, int priority);
  void PushPull(const std::vector<int>& keys, const py::list& values, const py::list& outs, int priority);
  void WaitAll();
  void Wait(const std::vector<int>& keys);
  py::list GetOptimizerStates(const std::vector<int>& keys);
  void SetOptimizerStates(const std::vector<int>& keys, const py::list& states);
  void Close();

 private:
  KVStore* Store() const {
    if (kv_ == nullptr) throw py::value_error("tally.kv: the KVStore is closed");
    return kv_.get();
  }
  // The element count of a known key; KeyError naming it otherwise.
  int64_t Numel(int key, const char* op) const;
  // Tensors for keys[i]'s num_devices_ arrays at arrays[i * num_devices_ + d].
  std::vector<std::vector<Tensor>> Wrap(const char* op, const std::vector<int>& keys, const py::list& arrays,
                                        bool writable);
  // Runs fn without the GIL, then raises its failure as tally.TallyError.
  template <typename Fn> void Call(Fn fn);
  void TearDown();

  std::shared_ptr<ReleaseQueue> queue_ = std::make_shared<ReleaseQueue>();
  int num_devices_ = 1;
  std::map<int, int64_t> numel_;  // the keys initialised, and their sizes
  std::unique_ptr<Cluster> cluster_;  // the distributed types; outlives kv_
  std::unique_ptr<KVStore> kv_;
};

template <typename Fn> void PyKVStore::Call(Fn fn) {
  queue_->Drain();
  Status s;
  {
    py::gil_scoped_release nogil;
    s = fn();
  }
  queue_->Drain();
  if (!s.ok()) ThrowStatus(s);
}

// Joins the job described by the DMLC_* environment (tools/launch.py) as a worker.
Status JoinAsWorker(std::unique_ptr<Cluster>* out) {
  ClusterConfig cfg;
  TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&cfg));
  if (cfg.role != wire::WORKER) {
    return Status::InvalidArgument("DMLC_ROLE is not worker: a scheduler or server runs its role on "
                                   "`import tally` and never creates a KVStore");
  }
  std::unique_ptr<Transport> transport;
  TALLY_RETURN_IF_ERROR(NewJobTransport(cfg, &transport));
  return Cluster::Join(cfg, std::move(transport), out);
}

PyKVStore::PyKVStore(const std::string& type, int num_devices) : num_devices_(num_devices) {
  KVStoreSpec spec;
  Status s = ParseKVStoreType(type, &spec.type);
  if (!s.ok()) throw py::value_error("tally.kv.create: type '" + type + "': " + s.message());
  if (num_devices < 1) throw py::value_error("tally.kv.create: num_devices must be at least 1");
  spec.num_devices = num_devices;
  Call([&] {
    if (IsDistributed(spec.type)) {
      TALLY_RETURN_IF_ERROR(JoinAsWorker(&cluster_));
      spec.cluster = cluster_.get();
    }
    return KVStore::Create(spec, &kv_);
  });
  if (IsDistributed(spec.type)) ForgetJobSecret();
}

py::list PyKVStore::heard_membership() {
  KVStore* kv = Store();
  std::vector<MembershipView::Membership> changes;
  Call([&] { return kv->membership_view()->HeardMembership(&changes); });
  py::list out;
  for (const MembershipView::Membership& c : changes) out.append(py::make_tuple(c.epoch, c.from_step, c.live));
  return out;
}

std::vector<int> PyKVStore::keys() const {
  std::vector<int> out;
  for (const auto& [key, numel] : numel_) out.push_back(key);
  return out;
}

int64_t PyKVStore::Numel(int key, const char* op) const {
  auto it = numel_.find(key);
  if (it == numel_.end()) {
    throw py::key_error(std::string("tally.kv ") + op + ": key " + std::to_string(key) +
                        " was not initialised (call init first)");
  }
  return it->second;
}

std::vector<std::vector<Tensor>> PyKVStore::Wrap(const char* op, const std::vector<int>& keys,
                                                 const py::list& arrays, bool writable) {
  if (arrays.size() != keys.size() * num_devices_) {
    throw py::value_error(std::string("tally.kv ") + op + ": " + std::to_string(arrays.size()) + " arrays for " +
                          std::to_string(keys.size()) + " keys of " + std::to_string(num_devices_) +
                          " devices each");
  }
  std::vector<std::vector<Tensor>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ArrayUse use{op, keys[i], Numel(keys[i], op), writable};
    for (int d = 0; d < num_devices_; ++d) out[i].push_back(ArrayToTensor(arrays[i * num_devices_ + d], use, queue_));
  }
  return out;
}

void PyKVStore::Barrier() {
  KVStore* kv = Store();
  Call([&] { return kv->Barrier(); });
}

// The optimizer of set_optimizer's keyword settings, under MXNet 1.9.1's names (optim/
// optimizer_config.h); None leaves a setting at its default. An unknown name is a TypeError.
OptimizerConfig OptimizerFromSettings(const std::string& type, const py::kwargs& settings) {
  OptimizerConfig c;
  c.type = type;
  const std::map<std::string, float*> floats = {
      {"lr", &c.lr},           {"momentum", &c.momentum},         {"wd", &c.wd},
      {"rescale_grad", &c.rescale_grad}, {"clip_gradient", &c.clip_gradient}, {"beta1", &c.beta1},
      {"beta2", &c.beta2},     {"epsilon", &c.epsilon},           {"gamma1", &c.gamma1},
      {"gamma2", &c.gamma2},   {"clip_weights", &c.clip_weights}, {"eta", &c.eta},
      {"wd_lh", &c.wd_lh},     {"lower_bound", &c.lower_bound},   {"upper_bound", &c.upper_bound}};
  const std::map<std::string, bool*> bools = {{"multi_precision", &c.multi_precision},
                                              {"centered", &c.centered},
                                              {"momentum_correction", &c.momentum_correction},
                                              {"bias_correction", &c.bias_correction},
                                              {"lazy_update", &c.lazy_update}};
  for (const auto& [key, value] : settings) {
    const std::string name = py::str(key);
    if (value.is_none()) continue;
    if (name == "no_wd_keys") {  // tally/kv.py checked them: ints >= 0
      for (const py::handle& k : value) c.no_wd_keys.insert(k.cast<int>());
    } else if (auto f = floats.find(name); f != floats.end()) {
      *f->second = value.cast<float>();
    } else if (auto b = bools.find(name); b != bools.end()) {
      *b->second = value.cast<bool>();
    } else {
      throw py::type_error("tally.kv set_optimizer: unknown setting '" + name + "'");
    }
  }
  return c;
}

void PyKVStore::SetOptimizer(const OptimizerConfig& config) {
  KVStore* kv = Store();
  Status s = ValidateOptimizerConfig(config);
  if (!s.ok()) throw py::value_error("tally.kv set_optimizer: " + s.message());
  Call([&] { return kv->SetOptimizer(config); });
}

void PyKVStore::SetGradientCompression(const std::string& type, float threshold) {
  KVStore* kv = Store();
  CompressionConfig gc;
  Status s = ParseCompression(type, threshold, &gc);
  if (!s.ok()) throw py::value_error("tally.kv set_gradient_compression: " + s.message());
  Call([&] { return kv->SetGradientCompression(gc); });
}

void PyKVStore::Init(const std::vector<int>& keys, const py::list& values) {
  KVStore* kv = Store();
  if (values.size() != keys.size()) {
    throw py::value_error("tally.kv init: " + std::to_string(values.size()) + " values for " +
                          std::to_string(keys.size()) + " keys");
  }
  std::vector<Tensor> tensors;
  std::map<int, int64_t> added;
  for (size_t i = 0; i < keys.size(); ++i) {
    const int key = keys[i];
    if (key < 0) throw py::key_error("tally.kv init: key " + std::to_string(key) + " is negative");
    if (numel_.count(key) || added.count(key)) {
      throw py::value_error("tally.kv init: key " + std::to_string(key) + " is already initialised");
    }
    // A joiner's init writes the job's values into the arrays (kvstore/dist_kvstore.h).
    tensors.push_back(ArrayToTensor(values[i], ArrayUse{"init", key, -1, joined()}, queue_));
    added[key] = tensors.back().numel();
  }
  Call([&] { return kv->Init(keys, tensors); });
  numel_.insert(added.begin(), added.end());
}

void PyKVStore::Push(const std::vector<int>& keys, const py::list& values, int priority) {
  KVStore* kv = Store();
  std::vector<std::vector<Tensor>> vals = Wrap("push", keys, values, false);
  Call([&] {
    for (size_t i = 0; i < keys.size(); ++i) TALLY_RETURN_IF_ERROR(kv->Push(keys[i], vals[i], priority));
    return Status::Ok();
  });
}

void PyKVStore::Pull(const std::vector<int>& keys, const py::list& outs, int priority) {
  KVStore* kv = Store();
  std::vector<std::vector<Tensor>> out = Wrap("pull", keys, outs, true);
  Call([&] {
    for (size_t i = 0; i < keys.size(); ++i) TALLY_RETURN_IF_ERROR(kv->Pull(keys[i], out[i], priority));
    return Status::Ok();
  });
}

void PyKVStore::PushPull(const std::vector<int>& keys, const py::list& values, const py::list& outs,
                         int priority) {
  KVStore* kv = Store();
  std::vector<std::vector<Tensor>> vals = Wrap("pushpull", keys, values, false);
  std::vector<std::vector<Tensor>> out = Wrap("pushpull", keys, outs, true);
  Call([&] {
    for (size_t i = 0; i < keys.size(); ++i) {
      TALLY_RETURN_IF_ERROR(kv->PushPull(keys[i], vals[i], out[i], priority));
    }
    return Status::Ok();
  });
}

void PyKVStore::WaitAll() {
  KVStore* kv = Store();
  Call([&] { return kv->WaitAll(); });
}

void PyKVStore::Wait(const std::vector<int>& keys) {
  KVStore* kv = Store();
  for (int key : keys) Numel(key, "wait");
  Call([&] {
    for (int key : keys) TALLY_RETURN_IF_ERROR(kv->WaitKey(key));
    return Status::Ok();
  });
}

py::list PyKVStore::GetOptimizerStates(const std::vector<int>& keys) {
  KVStore* kv = Store();
  for (int key : keys) Numel(key, "save_optimizer_states");
  std::vector<Tensor> states;
  Call([&] { return kv->GetOptimizerState(keys, &states); });
  py::list out;
  for (const Tensor& t : states) {
    if (!t.defined()) {
      out.append(py::none());
      continue;
    }
    const Tensor f32 = t.To(DType::kF32);
    py::array_t<float> a(f32.numel());
    std::memcpy(a.mutable_data(), f32.raw_data(), f32.nbytes());
    out.append(a);
  }
  return out;
}

void PyKVStore::SetOptimizerStates(const std::vector<int>& keys, const py::list& states) {
  KVStore* kv = Store();
  if (states.size() != keys.size()) throw py::value_error("tally.kv load_optimizer_states: one state per key");
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (states[i].is_none()) {
      tensors.emplace_back();
      continue;
    }
    // Any size here: the store checks it is the optimizer's slot count times the key's.
    Numel(keys[i], "load_optimizer_states");
    ArrayUse use{"load_optimizer_states", keys[i], -1, false};
    tensors.push_back(ArrayToTensor(states[i], use, queue_));
    if (tensors.back().dtype() != DType::kF32) {
      throw py::type_error("tally.kv load_optimizer_states: key " + std::to_string(keys[i]) + ": states are float32");
    }
  }
  Call([&] { return kv->SetOptimizerState(keys, tensors); });
}

void PyKVStore::Close() {
  if (kv_ == nullptr) return;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = kv_->WaitAll();
    // A worker's end: the scheduler ends the job once every worker has finished.
    if (cluster_ != nullptr) {
      Status finished = cluster_->Finish(kFinishTimeoutMs);
      if (s.ok()) s = finished;
    }
  }
  TearDown();
  if (!s.ok()) ThrowStatus(s);
}

void PyKVStore::TearDown() {
  {
    py::gil_scoped_release nogil;
    kv_.reset();
    cluster_.reset();
  }
  queue_->Drain();
}

}  // namespace

void BindKVStore(py::module_& m) {
  const OptimizerConfig d;  // the defaults, stated once in kvstore.h
  py::class_<PyKVStore>(m, "KVStore")
      .def(py::init<const std::string&, int>(), py::arg("type"), py::arg("num_devices") = 1)
      .def_property_readonly("type", &PyKVStore::type)
      .def_property_readonly("rank", &PyKVStore::rank)
      .def_property_readonly("num_workers", &PyKVStore::num_workers)
      .def_property_readonly("membership", &PyKVStore::membership)
      .def_property_readonly("summed_workers", &PyKVStore::summed_workers)
      .def_property_readonly("joined", &PyKVStore::joined)
      .def_property_readonly("joined_after_epoch", &PyKVStore::joined_after_epoch)
      .def("heard_membership", &PyKVStore::heard_membership)
      .def_property_readonly("first_step", &PyKVStore::first_step)
      .def_property_readonly("num_devices", &PyKVStore::num_devices)
      .def_property_readonly("closed", &PyKVStore::closed)
      .def("keys", &PyKVStore::keys)
      .def("key_size", &PyKVStore::key_size)
      .def("barrier", &PyKVStore::Barrier)
      .def(
          "set_optimizer",
          [](PyKVStore& kv, const std::string& type, const py::kwargs& settings) {
            kv.SetOptimizer(OptimizerFromSettings(type, settings));
          },
          py::arg("type") = d.type)
      .def("set_learning_rate", &PyKVStore::SetLearningRate)
      .def("set_gradient_compression", &PyKVStore::SetGradientCompression, py::arg("type"), py::arg("threshold"))
      .def("init", &PyKVStore::Init)
      .def("push", &PyKVStore::Push)
      .def("pull", &PyKVStore::Pull)
      .def("pushpull", &PyKVStore::PushPull)
      .def("wait_all", &PyKVStore::WaitAll)
      .def("wait", &PyKVStore::Wait)
      .def("get_optimizer_states", &PyKVStore::GetOptimizerStates)
      .def("set_optimizer_states", &PyKVStore::SetOptimizerStates)
      .def("close", &PyKVStore::Close);
}

}  // namespace python
}  // namespace tally
