#!/usr/bin/env bash
# One device call for the copy_to_gpu_no_ce fix, on an H200: build sgl_kernel_ext
# (pip install --no-build-isolation), run tests/kernel (GPU tests incl. the patched
# upstream test file and the unpatched pre-image failing at N=16, drift, bench smoke),
# the GPU tests again under compute-sanitizer memcheck, then the C++ launch-cost
# microbenchmark and benchmarks/bench_copy.py (SKIP_BENCH=1 skips those two).
# The tests read both images from build/trees/sgl-kernel (`make trees`), so carry it:
#   device run: command "bash scripts/gpu_kernel.sh", carry ["build/trees/sgl-kernel"]
# Outputs under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_kernel_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_tests.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-16}
export SGL_KERNEL_EXT_BUILD_DIR=${SGL_KERNEL_EXT_BUILD_DIR:-/tmp/sgl_kernel_ext_build}
# Build with the compiler whose libstdc++ the process loads. On the H200 image, Python's
# sysconfig compiler and nvcc's default -ccbin are a newer GCC under /opt/gcc, and integer
# formatting in the extension's error messages then crashes (GPU_TESTS.md, runs 4-7). The
# image also exports CC=/opt/gcc/bin/gcc, so these override the environment (run 9).
if [ -x /usr/bin/gcc ] && [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ NVCC_CCBIN=/usr/bin/gcc
  export LDSHARED="/usr/bin/g++ -shared" LDCXXSHARED="/usr/bin/g++ -shared"
fi
PY=${PYTHON:-python3}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step environment
date -u
nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
$PY -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0))'
nvcc --version | tail -2
compute-sanitizer --version | head -2
echo "CC=${CC:-} CXX=${CXX:-} NVCC_CCBIN=${NVCC_CCBIN:-}"; ${CXX:-c++} --version | head -1
git --version; git -C build/trees/sgl-kernel log --oneline -2 || status=1
uname -r; nproc

step "background: compile launch_cost.cu"
(nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o /tmp/launch_cost benchmarks/launch_cost.cu \
  > /tmp/launch_cost_build.log 2>&1; echo "launch_cost build rc=$?" >> /tmp/launch_cost_build.log) &
bg_launch=$!

step "pip install --no-build-isolation ./sgl_kernel_ext"
t0=$(date +%s)
$PY -m pip install --no-build-isolation --no-deps --no-index ./sgl_kernel_ext 2>&1 | tail -4 || status=1
echo "build+install took $(( $(date +%s) - t0 )) s"
(cd /tmp && $PY -c 'import sgl_kernel_ext as s, torch; print("loaded", s.ensure_loaded(), s._C.__file__); print(torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce.default._schema)') || status=1

step "pytest tests/kernel (GPU tests, drift, bench smoke)"
timeout 300 $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py tests/kernel/test_kernel_patch_drift.py \
  tests/kernel/test_kernel_bench_smoke.py 2>&1 | tee "$OUT/pytest.log" | grep -v "^$" ; rc=${PIPESTATUS[0]}
echo "pytest rc=$rc"; [ "$rc" = 0 ] || status=1

step "compute-sanitizer --tool memcheck: GPU tests + patched upstream test file"
SGL_KERNEL_EXT_UNDER_SANITIZER=1 timeout 300 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
  $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py 2>&1 | tee "$OUT/pytest_memcheck.log" \
  | grep -v "^$"; rc=${PIPESTATUS[0]}
echo "compute-sanitizer rc=$rc"; [ "$rc" = 0 ] || status=1

wait "$bg_launch"  # (a bare `wait` would also wait for the tee behind `exec > >(tee ...)`)
cat /tmp/launch_cost_build.log
if [ -n "${SKIP_BENCH:-}" ]; then step "done (SKIP_BENCH): status=$status"; exit $status; fi

step "C++ launch-cost microbenchmark"
timeout 90 /tmp/launch_cost 20000 7 "$OUT/launch_cost.json" || status=1

step "benchmarks/bench_copy.py"
timeout 240 $PY benchmarks/bench_copy.py --load --launch-json "$OUT/launch_cost.json" --out-dir "$OUT"; rc=$?
echo "bench rc=$rc"; [ "$rc" = 0 ] || status=1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv

step "done: status=$status"
exit $status
