// Launch cost of a kernel that takes its data by value, as a function of the
// argument size, timed in a C++ loop (no Python). Part of benchmarks/bench_copy.py:
// does a 2 KiB by-value argument (the copy_to_gpu_no_ce fallback) cost more to
// launch than a 64 B one?
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o launch_cost launch_cost.cu
// Run:   ./launch_cost [calls=20000] [repeats=7] [json_path]
//
// For each argument size S (the whole parameter block, 64 B .. 32,760 B; CUDA
// 12.1+ allows 32,764 B on Volta and newer) and each repeat:
//   host_ns  : wall time of `calls` launches on one stream (the host fills the
//              S-byte argument before each launch, as the real op does) / calls
//   device_ns: CUDA-event time over the same loop / calls
//   sync_ns  : wall time of launch + cudaStreamSynchronize, per call (calls/10)
// Each repeat checks the output the last launch wrote. Two untimed passes over
// all sizes come first; the timed repeats interleave the sizes.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t err_ = (x);                                                                   \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

template <int S>
struct Arg {
  int* out;
  int n;
  int pad;
  int values[(S - 16) / 4];
};

template <int S>
__global__ void by_value_kernel(const Arg<S> arg) {
  int idx = threadIdx.x + blockIdx.x * blockDim.x;
  if (idx < arg.n) {
    arg.out[idx] = arg.values[idx];
  }
}

struct Result {
  int bytes;
  std::vector<double> host_ns, device_ns, sync_ns;
};

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

template <int S>
void run_once(Result& r, int calls, int* d_out, cudaStream_t stream, bool record) {
  static_assert(sizeof(Arg<S>) == S, "argument block must be exactly S bytes");
  constexpr int kSlots = (S - 16) / 4;
  const int n = kSlots < 32 ? kSlots : 32;  // one warp writes, like a small copy
  r.bytes = S;
  std::vector<int> src(kSlots);
  Arg<S>* arg = new Arg<S>();  // 32 KiB: keep it off the stack
  arg->out = d_out;
  arg->n = n;
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < kSlots; ++i) src[i] = std::rand();
  CHECK(cudaMemsetAsync(d_out, 0xff, 32 * sizeof(int), stream));
  CHECK(cudaStreamSynchronize(stream));
  auto t0 = std::chrono::steady_clock::now();
  CHECK(cudaEventRecord(e0, stream));
  for (int i = 0; i < calls; ++i) {
    std::memcpy(arg->values, src.data(), sizeof(arg->values));
    by_value_kernel<S><<<1, 32, 0, stream>>>(*arg);
  }
  CHECK(cudaEventRecord(e1, stream));
  auto t1 = std::chrono::steady_clock::now();
  CHECK(cudaGetLastError());
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  int got[32];
  CHECK(cudaMemcpy(got, d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    if (got[i] != src[i]) {
      std::fprintf(stderr, "S=%d: wrong value at %d\n", S, i);
      std::exit(2);
    }
  }
  const int sync_calls = calls / 10;
  auto s0 = std::chrono::steady_clock::now();
  for (int i = 0; i < sync_calls; ++i) {
    std::memcpy(arg->values, src.data(), sizeof(arg->values));
    by_value_kernel<S><<<1, 32, 0, stream>>>(*arg);
    CHECK(cudaStreamSynchronize(stream));
  }
  auto s1 = std::chrono::steady_clock::now();
  if (record) {
    r.host_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
    r.device_ns.push_back(ms * 1e6 / calls);
    r.sync_ns.push_back(std::chrono::duration<double, std::nano>(s1 - s0).count() / sync_calls);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  delete arg;
}

using RunFn = void (*)(Result&, int, int*, cudaStream_t, bool);

static std::string join(const std::vector<double>& v) {
  std::string s;
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.1f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s;
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  const char* json_path = argc > 3 ? argv[3] : nullptr;
  int* d_out = nullptr;
  CHECK(cudaMalloc(&d_out, 64 * sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const RunFn fns[] = {
      run_once<64>,
      run_once<128>,
      run_once<256>,
      run_once<512>,
      run_once<1024>,
      run_once<2048>,
      run_once<2064>,  // the fallback's 2 KiB array + length + pointer
      run_once<4096>,
      run_once<8192>,
      run_once<16384>,
      run_once<32760>};
  constexpr int kSizes = sizeof(fns) / sizeof(fns[0]);
  std::vector<Result> results(kSizes);
  // Warm-up, not recorded: module load, first launches, clocks ramping up.
  for (int w = 0; w < 2; ++w)
    for (int k = 0; k < kSizes; ++k) fns[k](results[k], calls, d_out, stream, false);
  // Repeats interleave the sizes (rotating the start), so drift hits all alike.
  for (int rep = 0; rep < repeats; ++rep)
    for (int j = 0; j < kSizes; ++j) {
      int k = (j + rep) % kSizes;
      fns[k](results[k], calls, d_out, stream, true);
    }
  cudaDeviceProp prop;
  int dev = 0, driver = 0, runtime = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaGetDeviceProperties(&prop, dev));
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("launch cost of a by-value kernel, %d calls x %d repeats, %s\n", calls, repeats, prop.name);
  std::printf("%10s %14s %16s %18s\n", "arg bytes", "host ns/call", "device ns/call", "launch+sync ns");
  for (auto& r : results) {
    std::printf(
        "%10d %14.1f %16.1f %18.1f\n", r.bytes, median(r.host_ns), median(r.device_ns), median(r.sync_ns));
  }
  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (!f) {
      std::perror(json_path);
      return 1;
    }
    std::fprintf(
        f,
        "{\n  \"device\": \"%s\",\n  \"cuda_driver\": %d,\n  \"cuda_runtime\": %d,\n  \"calls\": %d,\n"
        "  \"repeats\": %d,\n  \"results\": [\n",
        prop.name,
        driver,
        runtime,
        calls,
        repeats);
    for (size_t i = 0; i < results.size(); ++i) {
      auto& r = results[i];
      std::fprintf(
          f,
          "    {\"arg_bytes\": %d, \"host_ns\": [%s], \"device_ns\": [%s], \"sync_ns\": [%s]}%s\n",
          r.bytes,
          join(r.host_ns).c_str(),
          join(r.device_ns).c_str(),
          join(r.sync_ns).c_str(),
          i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  CHECK(cudaFree(d_out));
  return 0;
}
