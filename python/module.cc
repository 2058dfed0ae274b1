// The `tally` Python extension, _tally: the package tally/ (kv.py, __init__.py) is its
// interface, and this module only what tally/ builds on. What each piece does: bindings.h.
//
//   PYTHONPATH=build/python /usr/bin/python3 -c 'import tally; print(tally.kv.create("local").type)'
#include <string>

#include <pybind11/stl.h>

#include "models/layer_costs.h"
#include "python/bindings.h"

namespace tally {
namespace python {
namespace {

// tally.TallyError, created once when the module loads.
PyObject* g_tally_error = nullptr;

std::vector<int64_t> ResNet50KeySizes() {
  std::vector<LayerGroup> groups;
  Status s = LayerGroups(ModelConfig(), &groups);
  if (!s.ok()) ThrowStatus(s);
  std::vector<int64_t> sizes;
  for (const LayerGroup& g : groups) sizes.insert(sizes.end(), g.numel.begin(), g.numel.end());
  return sizes;
}

}  // namespace

void ThrowStatus(const Status& s) {
  PyErr_SetString(g_tally_error, s.ToString().c_str());
  throw py::error_already_set();
}

void BindErrors(py::module_& m) {
  g_tally_error = PyErr_NewExceptionWithDoc(
      "tally.TallyError",
      "A failure Tally reported: the job, a peer, a file or an argument the store refused. "
      "The message is Tally's own.",
      PyExc_RuntimeError, nullptr);
  m.attr("TallyError") = py::reinterpret_borrow<py::object>(g_tally_error);
}

}  // namespace python
}  // namespace tally

PYBIND11_MODULE(_tally, m) {
  m.doc() = "Tally's parameter server from Python; use the package tally (tally.kv), not this module";
  tally::python::BindErrors(m);
  tally::python::BindKVStore(m);
  tally::python::BindRoles(m);
  m.def("resnet50_key_sizes", &tally::python::ResNet50KeySizes,
        "The element counts of ResNet-50's 161 trainable arrays, in key order (models/layer_costs.h)");
}
