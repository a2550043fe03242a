#!/usr/bin/env bash
# One device call for issues 3 and 7 (copy_to_gpu_no_ce), on an H200:
#   build sgl_kernel_ext (pip install --no-build-isolation), run tests/kernel's GPU
#   tests (patched upstream test file against the extension, own tests, the unpatched
#   pre-image failing at N=16), the same under compute-sanitizer memcheck, then the
#   C++ launch-cost microbenchmark and benchmarks/bench_copy.py.
# Usage (device tool): bash scripts/gpu_kernel.sh        Outputs under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_kernel_out}
mkdir -p "$OUT"
LOG="$OUT/gpu_tests.log"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-16}
export SGL_KERNEL_EXT_BUILD_DIR=${SGL_KERNEL_EXT_BUILD_DIR:-/tmp/sgl_kernel_ext_build}
mkdir -p "$SGL_KERNEL_EXT_BUILD_DIR/preimage"
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
uname -r; nproc

step "background: compile launch_cost.cu and the unpatched pre-image (JIT)"
(nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o /tmp/launch_cost benchmarks/launch_cost.cu \
  > /tmp/launch_cost_build.log 2>&1; echo "launch_cost build rc=$?" >> /tmp/launch_cost_build.log) &
bg_launch=$!
(PYTHONPATH=sgl_kernel_ext/python:tests/kernel timeout 240 $PY tests/kernel/probe_preimage.py \
  "$SGL_KERNEL_EXT_BUILD_DIR/preimage" > /tmp/preimage_prebuild.log 2>&1) &
bg_pre=$!

step "pip install --no-build-isolation ./sgl_kernel_ext"
t0=$(date +%s)
$PY -m pip install --no-build-isolation --no-deps --no-index ./sgl_kernel_ext 2>&1 | tail -4 || status=1
echo "build+install took $(( $(date +%s) - t0 )) s"
(cd /tmp && $PY -c 'import sgl_kernel_ext as s, torch; print("loaded", s.ensure_loaded(), s._C.__file__); print(torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce.default._schema)') || status=1
echo "--- toolchain and what the extension links (run 4 crashed in std::ostream::_M_insert<long> inside _C.so):"
command -v c++ g++ gcc; c++ --version | head -1; env | grep -E '^(CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|NVCC_)' || true
SO=$(cd /tmp && $PY -c 'import sgl_kernel_ext._C as m; print(m.__file__)')
readelf -d "$SO" | grep -E 'NEEDED|RPATH|RUNPATH'
echo "std::ostream/locale symbols DEFINED in _C.so (0 when libstdc++ is linked dynamically): $(nm -C "$SO" | grep -E ' [TtWw] ' | grep -v clone | grep -cE 'std::(basic_ostream|locale|codecvt)')"
echo "--- error paths, one process each (a crash names its case):"
for c in n18 n0 n513 int64_16 mismatch_16; do
  (cd /tmp && PYTHONPATH=$OLDPWD/tests/kernel $PY "$OLDPWD/tests/kernel/probe_errors.py" $c sgl_kernel_ext 2>&1 | tail -1)
  echo "  $c rc=${PIPESTATUS[0]}"
done

step "wait for the background builds"
# (a bare `wait` would also wait for the tee behind `exec > >(tee ...)`)
wait "$bg_launch" "$bg_pre"
cat /tmp/launch_cost_build.log
echo "--- pre-image probe (prebuild):"; tail -3 /tmp/preimage_prebuild.log
if [ -n "${DIAG:-}" ]; then
  echo "--- cuda-gdb backtrace of the N=0 error path (only if it crashes):"
  (cd /tmp && PYTHONPATH=$OLDPWD/tests/kernel timeout 90 cuda-gdb -q -batch -ex run -ex bt \
    --args $PY "$OLDPWD/tests/kernel/probe_errors.py" n0 sgl_kernel_ext 2>&1 | grep -v "^\[New Thread\|^\[Thread\|^\[Detaching" | tail -40)
fi

step "pytest tests/kernel (GPU tests, drift, bench smoke)"
timeout 200 $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py tests/kernel/test_kernel_patch_drift.py \
  tests/kernel/test_kernel_bench_smoke.py -s 2>&1 | tee "$OUT/pytest.log" | grep -v "^$" ; rc=${PIPESTATUS[0]}
echo "pytest rc=$rc"; [ "$rc" = 0 ] || status=1

step "compute-sanitizer --tool memcheck: GPU tests + patched upstream test file"
SGL_KERNEL_EXT_UNDER_SANITIZER=1 timeout 240 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
  $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py 2>&1 | grep -v "^$"; rc=${PIPESTATUS[0]}
echo "compute-sanitizer rc=$rc"; [ "$rc" = 0 ] || status=1

if [ -n "${SKIP_BENCH:-}" ]; then step "done (SKIP_BENCH): status=$status"; exit $status; fi

step "C++ launch-cost microbenchmark"
timeout 90 /tmp/launch_cost 20000 7 "$OUT/launch_cost.json" || status=1

step "benchmarks/bench_copy.py"
timeout 240 $PY benchmarks/bench_copy.py --load --launch-json "$OUT/launch_cost.json" --out-dir "$OUT"; rc=$?
echo "bench rc=$rc"; [ "$rc" = 0 ] || status=1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv

step "done: status=$status"
exit $status
