// Test-only: registers the unpatched copy.cu (the tree's pre-image) as
// torch.ops.sgl_kernel_ext_preimage.copy_to_gpu_no_ce, with sgl-kernel's schema and
// dispatch key, so that probe_preimage.py can show the bug before the fix.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

// Defined in the pre-image copy.cu.
void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);

TORCH_LIBRARY(sgl_kernel_ext_preimage, m) {
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce", c10::kCUDA, &copy_to_gpu_no_ce);
}
