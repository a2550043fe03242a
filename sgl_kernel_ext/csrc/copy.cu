#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

// Largest length the fallback kernel accepts. Its by-value argument is a fixed
// 512-slot array (2 KiB) plus the true length, which stays well under the
// traditional 4 KiB kernel-parameter limit; one block of up to 512 threads
// covers it.
constexpr int kCopyToGpuNoCeMaxN = 512;
static_assert(kCopyToGpuNoCeMaxN <= 1024, "one thread block must cover the fallback");

template <int N>
struct InputArray {
  int values[N];
};

using FallbackInputArray = InputArray<kCopyToGpuNoCeMaxN>;

template <int N>
__global__ void copy_to_gpu_no_ce_kernel(const InputArray<N> input_array, int* output) {
  int idx = threadIdx.x + blockIdx.x * blockDim.x;
  if (idx < N) {
    output[idx] = input_array.values[idx];
  }
}

// One kernel, compiled once, for every length without an exact kernel.
__global__ void copy_to_gpu_no_ce_fallback_kernel(const FallbackInputArray input_array, int n, int* output) {
  int idx = threadIdx.x + blockIdx.x * blockDim.x;
  if (idx < n) {
    output[idx] = input_array.values[idx];
  }
}

// Checks shared by every path; returns the number of elements to copy.
int64_t check_copy_to_gpu_no_ce_args(const at::Tensor& input, const at::Tensor& output) {
  TORCH_CHECK(input.dim() == 1, "copy_to_gpu_no_ce: input must be 1-D, got ", input.dim(), "-D");
  TORCH_CHECK(input.is_contiguous(), "copy_to_gpu_no_ce: input must be contiguous");
  TORCH_CHECK(input.scalar_type() == at::kInt, "copy_to_gpu_no_ce: input must be int32, got ", input.scalar_type());
  TORCH_CHECK(input.device().is_cpu(), "copy_to_gpu_no_ce: input must be a CPU tensor, got ", input.device());

  TORCH_CHECK(output.dim() == 1, "copy_to_gpu_no_ce: output must be 1-D, got ", output.dim(), "-D");
  TORCH_CHECK(output.is_contiguous(), "copy_to_gpu_no_ce: output must be contiguous");
  TORCH_CHECK(output.scalar_type() == at::kInt, "copy_to_gpu_no_ce: output must be int32, got ", output.scalar_type());
  TORCH_CHECK(output.device().is_cuda(), "copy_to_gpu_no_ce: output must be a CUDA tensor, got ", output.device());

  const int64_t n = input.numel();
  TORCH_CHECK(output.numel() == n, "copy_to_gpu_no_ce: input has ", n, " elements but output has ", output.numel());
  TORCH_CHECK(n > 0, "copy_to_gpu_no_ce: input is empty (N = 0); N must be in [1, ", kCopyToGpuNoCeMaxN, "]");
  TORCH_CHECK(n <= kCopyToGpuNoCeMaxN, "copy_to_gpu_no_ce: N = ", n, " exceeds the maximum of ", kCopyToGpuNoCeMaxN);
  return n;
}

// Calls copy(std::integral_constant<int, Capacity>{}) with the kernel's capacity for
// n values: exact kernels for the common local expert counts, the fallback
// (kCopyToGpuNoCeMaxN) for every other length.
template <typename Copy>
decltype(auto) dispatch_copy_to_gpu_no_ce(int64_t n, Copy&& copy) {
  if (n == 72) {
    return copy(std::integral_constant<int, 72>{});
  } else if (n == 64) {
    return copy(std::integral_constant<int, 64>{});
  } else if (n == 32) {
    return copy(std::integral_constant<int, 32>{});
  } else if (n == 16) {
    return copy(std::integral_constant<int, 16>{});
  }
  return copy(std::integral_constant<int, kCopyToGpuNoCeMaxN>{});
}

// Launches the kernel for Capacity (exact) or the fallback on the current stream of
// the output's device.
template <int Capacity>
void launch_copy_to_gpu_no_ce(const InputArray<Capacity>& input_array, int n, at::Tensor& output) {
  // Switches device only when the output is not on the current one: the common
  // case costs one device query, as the current-stream lookup alone did.
  const c10::DeviceIndex device = output.device().index();
  at::cuda::OptionalCUDAGuard device_guard;
  if (device != c10::cuda::current_device()) {
    device_guard.set_index(device);
  }
  // may use multi thread blocks if performance bottleneck
  dim3 grid(1);
  dim3 block(n);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(device);
  if constexpr (Capacity == kCopyToGpuNoCeMaxN) {
    copy_to_gpu_no_ce_fallback_kernel<<<grid, block, 0, stream>>>(input_array, n, output.data_ptr<int>());
  } else {
    copy_to_gpu_no_ce_kernel<Capacity><<<grid, block, 0, stream>>>(input_array, output.data_ptr<int>());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int Capacity>
void copy_to_gpu_no_ce_impl(const at::Tensor& input, at::Tensor& output, int n) {
  InputArray<Capacity> input_array;
  const int* input_ptr = input.data_ptr<int>();
  for (int i = 0; i < n; ++i) {
    input_array.values[i] = input_ptr[i];
  }
  launch_copy_to_gpu_no_ce<Capacity>(input_array, n, output);
}

void copy_to_gpu_no_ce_fallback_impl(const at::Tensor& input, at::Tensor& output) {
  const int64_t n = check_copy_to_gpu_no_ce_args(input, output);
  copy_to_gpu_no_ce_impl<kCopyToGpuNoCeMaxN>(input, output, static_cast<int>(n));
}

void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output) {
  const int n = static_cast<int>(check_copy_to_gpu_no_ce_args(input, output));
  dispatch_copy_to_gpu_no_ce(
      n, [&](auto capacity) { copy_to_gpu_no_ce_impl<decltype(capacity)::value>(input, output, n); });
}

// The same copy for a host list of ints (sglang's per-expert token counts):
// returns a new int32 tensor on the current CUDA device, filled by one
// by-value kernel launch, without a CPU tensor in between.
at::Tensor copy_list_to_gpu_no_ce(at::IntArrayRef values) {
  const int64_t N = static_cast<int64_t>(values.size());
  TORCH_CHECK(N > 0, "copy_list_to_gpu_no_ce: values is empty (N = 0); N must be in [1, ", kCopyToGpuNoCeMaxN, "]");
  TORCH_CHECK(
      N <= kCopyToGpuNoCeMaxN, "copy_list_to_gpu_no_ce: N = ", N, " exceeds the maximum of ", kCopyToGpuNoCeMaxN);
  const int n = static_cast<int>(N);
  return dispatch_copy_to_gpu_no_ce(n, [&](auto capacity) {
    InputArray<decltype(capacity)::value> input_array;
    for (int i = 0; i < n; ++i) {
      const int64_t value = values[i];
      TORCH_CHECK(
          value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max(),
          "copy_list_to_gpu_no_ce: values[",
          i,
          "] = ",
          value,
          " does not fit in int32");
      input_array.values[i] = static_cast<int>(value);
    }
    at::Tensor output =
        at::empty({N}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, c10::cuda::current_device()));
    launch_copy_to_gpu_no_ce(input_array, n, output);
    return output;
  });
}
