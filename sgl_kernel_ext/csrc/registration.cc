// Registration of the sgl-kernel copy_to_gpu_no_ce op in the extension's own
// namespace. copy.cu next to this file is sgl-kernel's
// csrc/elementwise/copy.cu after patches/sgl-kernel/0001-*.patch, byte for
// byte; nothing here changes what it does.
#include <ATen/core/Tensor.h>
#include <Python.h>
#include <torch/library.h>

// Defined in copy.cu.
void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);
#ifndef SGL_KERNEL_EXT_PREIMAGE
void copy_to_gpu_no_ce_fallback_impl(const at::Tensor& input, at::Tensor& output);
#endif

// An empty Python module, so that `import sgl_kernel_ext._C` loads the library
// and runs the registration below.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}

// The op namespace: torch.ops.sgl_kernel_ext unless the build names another
// (the tests build the unpatched copy.cu as sgl_kernel_ext_preimage).
#ifndef SGL_KERNEL_EXT_NAMESPACE
#define SGL_KERNEL_EXT_NAMESPACE sgl_kernel_ext
#endif
// TORCH_LIBRARY pastes its first argument, so expand the macro one level up.
#define SGL_KERNEL_EXT_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)

SGL_KERNEL_EXT_LIBRARY(SGL_KERNEL_EXT_NAMESPACE, m) {
  // Same schema and dispatch key as sgl-kernel's own registration.
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce", c10::kCUDA, &copy_to_gpu_no_ce);
#ifndef SGL_KERNEL_EXT_PREIMAGE
  // Benchmark-only: always the one fallback kernel, whatever N (1..512).
  m.def("copy_to_gpu_no_ce_fallback(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce_fallback", c10::kCUDA, &copy_to_gpu_no_ce_fallback_impl);
#endif
}
