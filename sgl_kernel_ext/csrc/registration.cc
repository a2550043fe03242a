// Registration of the sgl-kernel copy ops in the extension's own namespace,
// and the module sgl_kernel_ext._C. copy.cu next to this file is sgl-kernel's
// csrc/elementwise/copy.cu after patches/sgl-kernel/*.patch, byte for byte;
// nothing here changes what it does.
#include <ATen/core/Tensor.h>
#include <Python.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <exception>
#include <vector>

// Defined in copy.cu.
void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);
void copy_to_gpu_no_ce_fallback_impl(const at::Tensor& input, at::Tensor& output);
at::Tensor copy_list_to_gpu_no_ce(at::IntArrayRef values);

// libtorch_python's; torch/csrc/autograd/python_variable.h declares it, but that
// header pulls in pybind11, which does not build under Python's limited API.
PyObject* THPVariable_Wrap(const at::TensorBase& var);

namespace {

// _C.copy_list_to_gpu_no_ce(values): copy_list_to_gpu_no_ce for a Python list or
// tuple of ints, read here in one pass. Through the dispatcher, an int[] argument
// is first boxed element by element, which costs more than the launch at N = 512.
PyObject* py_copy_list_to_gpu_no_ce(PyObject* /*module*/, PyObject* values) {
  const bool is_list = PyList_Check(values);
  if (!is_list && !PyTuple_Check(values)) {
    PyErr_SetString(PyExc_TypeError, "copy_list_to_gpu_no_ce: values must be a list or tuple of ints");
    return nullptr;
  }
  const Py_ssize_t n = is_list ? PyList_Size(values) : PyTuple_Size(values);
  // On the stack up to kStackValues (the op's bound); longer lists are read only
  // to be refused by the op with its own message.
  constexpr Py_ssize_t kStackValues = 512;
  int64_t stack[kStackValues];
  std::vector<int64_t> heap(n > kStackValues ? n : 0);
  int64_t* buffer = n > kStackValues ? heap.data() : stack;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = is_list ? PyList_GetItem(values, i) : PyTuple_GetItem(values, i);
    // long is 64-bit on Linux; PyLong_AsLong has a faster path than
    // PyLong_AsLongLong for ints of more than one 30-bit digit.
    const long value = PyLong_AsLong(item);
    if (value == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    buffer[i] = value;
  }
  try {
    return THPVariable_Wrap(copy_list_to_gpu_no_ce(at::IntArrayRef(buffer, static_cast<size_t>(n))));
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyMethodDef methods[] = {
    {"copy_list_to_gpu_no_ce",
     py_copy_list_to_gpu_no_ce,
     METH_O,
     "copy_list_to_gpu_no_ce(values) -> Tensor: 1..512 ints to a new int32 tensor on the current CUDA device"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

// `import sgl_kernel_ext._C` loads the library, which runs the registration below.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}

TORCH_LIBRARY(sgl_kernel_ext, m) {
  // Same schema and dispatch key as sgl-kernel's own registration.
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce", c10::kCUDA, &copy_to_gpu_no_ce);
  // No tensor argument to dispatch on: one kernel for every backend.
  m.def("copy_list_to_gpu_no_ce(int[] values) -> Tensor", &copy_list_to_gpu_no_ce);
  // Benchmark-only: always the one fallback kernel, whatever N (1..512).
  m.def("copy_to_gpu_no_ce_fallback(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce_fallback", c10::kCUDA, &copy_to_gpu_no_ce_fallback_impl);
}
