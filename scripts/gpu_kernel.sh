#!/usr/bin/env bash
# One device call: the GPU tests of sgl-kernel 0001's post-image (tests/kernel/test_kernel_gpu.py)
# and benchmarks/caller_bench.py (the DeepGEMM runner's caller over the stock, KT and post-image
# copy.cu: correctness for N = 1..513, the special inputs, threads and a CUDA graph capture; host
# µs per call, the patched caller beside stock's). Each copy.cu is a test-only torch extension
# build (tests/kernel/copy_ext.py), byte for byte from build/trees (the KT fork's: sgl-kernel's
# pre-image without its N = 32 kernel, proven by its blob id).
# Needs build/trees/sgl-kernel (`make trees`) and the callers' files
# (`python benchmarks/caller_bench.py --write-sources build/gpu_carry/sources`):
#   device run: command "bash scripts/gpu_kernel.sh", carry ["build/trees/sgl-kernel", "build/gpu_carry"]
# Outputs under $OUT. No `set -e`: every step runs, each failure sets the exit status.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_kernel.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
export COPY_EXT_BUILD=${COPY_EXT_BUILD:-$PWD/build/copy_ext}
# Build with the compiler whose libstdc++ the process loads: on the H200 image Python's
# sysconfig compiler and nvcc's default -ccbin are a newer GCC under /opt/gcc (CC is exported
# too), and an extension built with it fails to load or crashes formatting its error messages.
if [ -x /usr/bin/gcc ] && [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ NVCC_CCBIN=/usr/bin/gcc
  export LDSHARED="/usr/bin/g++ -shared" LDCXXSHARED="/usr/bin/g++ -shared"
fi
PY=${PYTHON:-python3}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step environment
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
$PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
nvcc --version | tail -1; uname -r; nproc

step "test-only builds of the three copy.cu files (in parallel)"
pids=()
for k in stock kt post; do
  $PY - "$k" <<'PY' &
import sys
from pathlib import Path
sys.path[:0] = ["tests/kernel", "benchmarks"]
import caller_bench, copy_ext
caller_bench.SOURCES = Path("build/gpu_carry/sources")
copy_ext.build(sys.argv[1], caller_bench.kernel_source(sys.argv[1]), Path(__import__("os").environ["COPY_EXT_BUILD"]))
print("built", sys.argv[1], flush=True)
PY
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

step "pytest tests/kernel/test_kernel_gpu.py"
timeout 300 $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py 2>&1 | tee "$OUT/pytest.log" | grep -v "^$"
rc=${PIPESTATUS[0]}; echo "pytest rc=$rc"; [ "$rc" = 0 ] || status=1

step "benchmarks/caller_bench.py"
timeout 420 $PY benchmarks/caller_bench.py --sources build/gpu_carry/sources \
  --build-dir "$COPY_EXT_BUILD" --out-dir "$OUT" || status=1
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
step "done: status=$status"
exit $status
