// Registration of the sgl-kernel copy ops in the extension's own namespace,
// and the module sgl_kernel_ext._C. copy.cu next to this file is sgl-kernel's
// csrc/elementwise/copy.cu after patches/sgl-kernel/*.patch, byte for byte;
// nothing here changes what it does.
#include <ATen/core/Tensor.h>
#include <Python.h>
#include <c10/core/DeviceType.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>

// copy.cu's kCopyToGpuNoCeMaxN, passed by the build (sgl_kernel_ext/_build.py reads it
// from copy.cu), so that the bound has one source.
#ifndef SGL_KERNEL_EXT_MAX_N
#error "SGL_KERNEL_EXT_MAX_N must be defined by the build (sgl_kernel_ext/_build.py)"
#endif
constexpr Py_ssize_t kMaxN = SGL_KERNEL_EXT_MAX_N;

// Defined in copy.cu.
void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);
void copy_to_gpu_no_ce_fallback_impl(const at::Tensor& input, at::Tensor& output);
at::Tensor copy_list_to_gpu_no_ce(at::IntArrayRef values);

// libtorch_python's own functions; torch/csrc/{autograd/python_variable,Exceptions,
// utils/device_lazy_init}.h declare them, but those headers pull in pybind11, which
// does not build under Python's limited API.
PyObject* THPVariable_Wrap(const at::TensorBase& var);
namespace torch {
void translate_exception_to_python(const std::exception_ptr& e_ptr);
namespace utils {
void device_lazy_init(at::DeviceType device_type);
}  // namespace utils
}  // namespace torch

namespace {

// One item of an exact list or tuple as an int32, or false. Under Python's limited
// API (the cp310-abi3 build) PyLong_AsLong is a call per item; a build for one
// Python version >= 3.12 reads a one-digit int in place.
inline bool item_as_int32(PyObject* item, int64_t* out) {
  if (!PyLong_CheckExact(item)) {
    return false;
  }
#if !defined(Py_LIMITED_API) && PY_VERSION_HEX >= 0x030C0000
  if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(item))) {
    const Py_ssize_t value = PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(item));
    *out = value;
    return value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max();
  }
#endif
  // long is 64-bit on Linux; PyLong_AsLong has a faster path than
  // PyLong_AsLongLong for ints of more than one 30-bit digit.
  const long value = PyLong_AsLong(item);
  if (value == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = value;
  return value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max();
}

// Reads values into buffer when it is an exact list or tuple of 1..kMaxN exact ints,
// each in int32, and returns their number; else returns 0 (and leaves no Python error).
// It runs no Python code (no __index__, no __getitem__ of a subclass), so the sequence
// cannot change while it is read.
Py_ssize_t read_int32_values(PyObject* values, int64_t* buffer) {
  const bool is_list = PyList_CheckExact(values);
  if (!is_list && !PyTuple_CheckExact(values)) {
    return 0;
  }
  const Py_ssize_t n = is_list ? PyList_Size(values) : PyTuple_Size(values);
  if (n < 1 || n > kMaxN) {
    return 0;
  }
#ifdef Py_LIMITED_API
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = is_list ? PyList_GetItem(values, i) : PyTuple_GetItem(values, i);
    if (item == nullptr || !item_as_int32(item, &buffer[i])) {
      PyErr_Clear();
      return 0;
    }
  }
#else
  PyObject** items = is_list ? &PyList_GET_ITEM(values, 0) : &PyTuple_GET_ITEM(values, 0);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!item_as_int32(items[i], &buffer[i])) {
      return 0;
    }
  }
#endif
  return n;
}

// The copy for values read by read_int32_values, with torch's own error translation and
// CUDA initialisation (as torch.empty(device="cuda") would do).
PyObject* copy_values(const int64_t* buffer, Py_ssize_t n) {
  try {
    torch::utils::device_lazy_init(at::kCUDA);
    return THPVariable_Wrap(copy_list_to_gpu_no_ce(at::IntArrayRef(buffer, static_cast<size_t>(n))));
  } catch (...) {
    torch::translate_exception_to_python(std::current_exception());
  }
  return nullptr;
}

// tp_new of the types list_copier() makes: calling the type is the call. An exact list
// or tuple of 1..kMaxN ints in int32 is copied here in one launch; any other arguments
// go to the type's __wrapped__ (the caller being replaced), so every other input gets
// the original's answer.
PyObject* list_copier_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if ((kwargs == nullptr || PyDict_Size(kwargs) == 0) && PyTuple_Size(args) == 1) {
    int64_t buffer[kMaxN];
    const Py_ssize_t n = read_int32_values(PyTuple_GetItem(args, 0), buffer);
    if (n > 0) {
      return copy_values(buffer, n);
    }
  }
  PyObject* original = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__wrapped__");
  if (original == nullptr) {
    return nullptr;
  }
  PyObject* result = PyObject_Call(original, args, kwargs);
  Py_DECREF(original);
  return result;
}

// _C.list_copier(name, original) -> a new type, named name, whose call copies an exact
// list or tuple of 1..MAX_N ints in int32 to a new int32 tensor on the current CUDA
// device in one launch and hands any other arguments to original. A type, not a
// function: sglang's HookRegistry installs a REPLACE class as it is, while it wraps a
// REPLACE function in a Python frame.
PyObject* py_list_copier(PyObject* /*module*/, PyObject* args) {
  const char* name = nullptr;
  PyObject* original = nullptr;
  if (!PyArg_ParseTuple(args, "sO:list_copier", &name, &original)) {
    return nullptr;
  }
  // PyType_FromSpec keeps a pointer to the name before 3.12: the copy lives as long as
  // the process, like the type.
  char* stored_name = static_cast<char*>(PyMem_Malloc(std::strlen(name) + 1));
  if (stored_name == nullptr) {
    return PyErr_NoMemory();
  }
  std::strcpy(stored_name, name);
  PyType_Slot slots[] = {
      {Py_tp_new, reinterpret_cast<void*>(list_copier_new)},
      {Py_tp_doc,
       const_cast<char*>("copies an exact list or tuple of 1..MAX_N ints in int32 to a new int32 tensor on "
                         "the current CUDA device in one launch; any other arguments go to __wrapped__")},
      {0, nullptr}};
  PyType_Spec spec = {stored_name, 0, 0, Py_TPFLAGS_DEFAULT, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) {
    return nullptr;
  }
  if (PyObject_SetAttrString(type, "__wrapped__", original) < 0) {
    Py_DECREF(type);
    return nullptr;
  }
  return type;
}

// _C.read_values(values) -> the ints the fast path would copy, or None where it hands
// the call to the original; needs no GPU (the tests run it on a CPU machine).
PyObject* py_read_values(PyObject* /*module*/, PyObject* values) {
  int64_t buffer[kMaxN];
  const Py_ssize_t n = read_int32_values(values, buffer);
  if (n == 0) {
    Py_RETURN_NONE;
  }
  PyObject* out = PyList_New(n);
  if (out == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyLong_FromLongLong(buffer[i]);
    if (item == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SetItem(out, i, item);
  }
  return out;
}

PyMethodDef methods[] = {
    {"list_copier",
     py_list_copier,
     METH_VARARGS,
     "list_copier(name, original) -> type: the one-launch list copy, original for any other input"},
    {"read_values", py_read_values, METH_O, "read_values(values) -> list of ints the fast path copies, or None"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

// `import sgl_kernel_ext._C` loads the library, which runs the registration below.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr && PyModule_AddIntConstant(module, "MAX_N", kMaxN) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}

TORCH_LIBRARY(sgl_kernel_ext, m) {
  // Same schema and dispatch key as sgl-kernel's own registration.
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce", c10::kCUDA, &copy_to_gpu_no_ce);
  m.def("copy_list_to_gpu_no_ce(int[] values) -> Tensor");
  m.impl("copy_list_to_gpu_no_ce", &copy_list_to_gpu_no_ce);
  // Benchmark-only: always the one fallback kernel, whatever N (1..MAX_N).
  m.def("copy_to_gpu_no_ce_fallback(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce_fallback", c10::kCUDA, &copy_to_gpu_no_ce_fallback_impl);
}
