// The pieces of the `tally` Python extension (_tally), one per job, that module.cc puts
// together. Internal to python/: Python code sees them through the package tally/.
//
//   PYBIND11_MODULE(_tally, m) {
//     tally::python::BindErrors(m);   // first: the others raise tally.TallyError
//     tally::python::BindKVStore(m);
//     tally::python::BindRoles(m);      // run_role, RoleThreads (tally.bench)
//   }
//
// Values travel without copying: ArrayToTensor wraps a NumPy array's memory in a Tensor
// (Tensor::FromBlob) that holds a reference to the array. The reference is dropped when
// the last view of the Tensor is gone, which may be on one of the store's own threads,
// without the GIL: the release only queues the object, and the next call into the
// extension from Python (ReleaseQueue::Drain) drops the reference under the GIL.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "base/status.h"
#include "base/tensor.h"

namespace tally {
namespace python {

namespace py = pybind11;

void BindErrors(py::module_& m);
void BindKVStore(py::module_& m);
void BindRoles(py::module_& m);

// Raises tally.TallyError carrying s's message. REQUIRES: !s.ok(), the GIL held.
[[noreturn]] void ThrowStatus(const Status& s);

// Removes the job's secret variables from os.environ, Python's copy of the environment,
// once the process has read the job (ClusterConfigFromEnv takes them out of the C
// environment then): subprocess.Popen(env=dict(os.environ)) would pass them on.
// REQUIRES: the GIL held.
void ForgetJobSecret();

// Python objects whose last Tensor view is gone, waiting for the GIL to be released.
// Thread-safe.
class ReleaseQueue {
 public:
  void Add(PyObject* obj);
  // Drops the queued references. REQUIRES: the GIL held.
  void Drain();

 private:
  std::mutex mu_;
  std::vector<PyObject*> dead_;  // GUARDED_BY(mu_)
};

// What an array must be to stand for a key's value.
struct ArrayUse {
  const char* op;    // "push", "pull", ...: the start of every error message
  int key;
  int64_t numel;     // the key's element count; < 0: any
  bool writable;     // a pull's output
};

// Wraps `obj`, a C-contiguous NumPy array of float32, float16 or (as uint16 bits) bfloat16,
// in a Tensor of shape [numel] over the same memory, keeping obj alive through `queue`
// until the Tensor's last view is gone. Raises TypeError (not an array, another dtype) or
// ValueError (not contiguous, read-only output, wrong size) naming use.key.
// REQUIRES: the GIL held.
Tensor ArrayToTensor(const py::handle& obj, const ArrayUse& use, const std::shared_ptr<ReleaseQueue>& queue);

}  // namespace python
}  // namespace tally
