// NumPy arrays as Tensors without copying (bindings.h): the checks, and the references
// that keep the arrays' memory alive while the store uses it.
#include <string>

#include "python/bindings.h"

namespace tally {
namespace python {

void ReleaseQueue::Add(PyObject* obj) {
  std::lock_guard<std::mutex> lock(mu_);
  dead_.push_back(obj);
}

void ReleaseQueue::Drain() {
  std::vector<PyObject*> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead.swap(dead_);
  }
  // Outside the lock: dropping the last reference runs the array's deallocator, which may
  // release other Tensors (and so call Add) in turn.
  for (PyObject* obj : dead) Py_DECREF(obj);
}

namespace {

std::string Where(const ArrayUse& use) {
  return std::string("tally.kv ") + use.op + ": key " + std::to_string(use.key) + ": ";
}

// The Tensor dtype an array's element type stands for; false for any other.
bool TensorDType(const py::array& a, DType* out) {
  const char kind = a.dtype().kind();
  const py::ssize_t size = a.itemsize();
  if (kind == 'f' && size == 4) *out = DType::kF32;
  else if (kind == 'f' && size == 2) *out = DType::kF16;
  // NumPy has no bfloat16: tally.kv hands a torch.bfloat16 tensor over as its uint16 bits.
  else if (kind == 'u' && size == 2) *out = DType::kBF16;
  else return false;
  return true;
}

}  // namespace

Tensor ArrayToTensor(const py::handle& obj, const ArrayUse& use, const std::shared_ptr<ReleaseQueue>& queue) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(Where(use) + "expected a NumPy array or a CPU torch tensor, got " +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  DType dtype;
  if (!TensorDType(a, &dtype)) {
    throw py::type_error(Where(use) + "dtype " + std::string(py::str(a.dtype())) +
                         " is not supported; expected float32 or float16 (NumPy or torch) or bfloat16 (torch)");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(Where(use) + "the array is not contiguous; pass a contiguous one "
                          "(numpy.ascontiguousarray, torch.Tensor.contiguous)");
  }
  if (use.writable && !a.writeable()) {
    throw py::value_error(Where(use) + "the output array is read-only");
  }
  const int64_t numel = static_cast<int64_t>(a.size());
  if (numel == 0) throw py::value_error(Where(use) + "the array is empty");
  if (use.numel >= 0 && numel != use.numel) {
    throw py::value_error(Where(use) + "the array has " + std::to_string(numel) + " values; the key has " +
                          std::to_string(use.numel));
  }
  PyObject* ref = a.ptr();
  Py_INCREF(ref);
  return Tensor::FromBlob(const_cast<void*>(a.data()), {numel}, dtype, Device::Cpu(),
                          [queue, ref](void*) { queue->Add(ref); });
}

}  // namespace python
}  // namespace tally
