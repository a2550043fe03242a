#!/usr/bin/env bash
# One device call for the copy_to_gpu_no_ce patches, on an H200: build the sgl_kernel_ext
# wheel (cp310-abi3, pip wheel --no-build-isolation) and install it, list its machine code
# (cuobjdump), run tests/kernel (GPU tests incl. the patched upstream test file, the
# differential test of every list entry point and the unpatched pre-image failing at N=16,
# drift, bench smoke), the GPU tests again under compute-sanitizer memcheck, then
# benchmarks/bench_copy.py (paired blocks + profiler) with per-expert counts and with
# full-range values, beside stock's copy.cu and an earlier post-image (VARIANT_OLD) and
# through sglang's own plugin loader (build/trees/sglang/python), and
# benchmarks/launch_cost.cu, the C++ launch floor. NCU=1 adds Nsight Compute kernel
# durations; SKIP_TESTS=1 / SKIP_MEMCHECK=1 / SKIP_BENCH=1 skip the tests / the sanitizer
# run / the benchmarks; LIMITED_API=0 builds the wheel for this Python only
# (SGL_KERNEL_EXT_LIMITED_API=0, sgl_kernel_ext/setup.py) and suffixes the benchmark
# outputs with _cpython; RELEASE_ARCHS and CARRIED_WHEEL below.
# The tests read both images from build/trees/sgl-kernel (`make trees`), the benchmark the
# plugin files and the DeepGEMM runner of build/trees/sglang/python; carry them:
#   device run: command "bash scripts/gpu_kernel.sh", carry ["build/trees/sgl-kernel", ...]
# Outputs under $OUT (at most 8 files).
# No `set -e`: every step runs even when an earlier one fails, so that one call reports
# everything; each step's failure sets `status`, the script's exit code.
set -u -o pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_tests.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# RELEASE_ARCHS=1: build the release architectures (sgl_kernel_ext/README.md, "The wheel")
# and run the GPU tests once more with CUDA_FORCE_PTX_JIT=1 (the compute_80 PTX).
if [ -n "${RELEASE_ARCHS:-}" ]; then
  export SGL_KERNEL_EXT_ARCHS=release; unset TORCH_CUDA_ARCH_LIST
else
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
fi
export MAX_JOBS=${MAX_JOBS:-16}
export SGL_KERNEL_EXT_BUILD_DIR=${SGL_KERNEL_EXT_BUILD_DIR:-$WORK/jit}
# Build with the compiler whose libstdc++ the process loads. On the H200 image, Python's
# sysconfig compiler and nvcc's default -ccbin are a newer GCC under /opt/gcc, and integer
# formatting in the extension's error messages then crashes (sgl_kernel_ext/README.md,
# "Build"). The image also exports CC=/opt/gcc/bin/gcc, so these override the environment.
if [ -x /usr/bin/gcc ] && [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ NVCC_CCBIN=/usr/bin/gcc
  export LDSHARED="/usr/bin/g++ -shared" LDCXXSHARED="/usr/bin/g++ -shared"
fi
PY=${PYTHON:-python3}
SUFFIX=""
if [ "${LIMITED_API:-1}" = 0 ]; then export SGL_KERNEL_EXT_LIMITED_API=0; SUFFIX=_cpython; fi
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step environment
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
$PY -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0))'
nvcc --version | tail -2
compute-sanitizer --version | head -2
echo "CC=${CC:-} CXX=${CXX:-} NVCC_CCBIN=${NVCC_CCBIN:-}"; ${CXX:-c++} --version | head -1
git -C build/trees/sgl-kernel log --oneline -3 || status=1
uname -r; nproc

# stock's copy.cu (the pre-image) and an earlier post-image for the benchmark, built in the
# background while the wheel builds (bench_copy.py then finds them up to date)
VARIANTS=$WORK/variants
mkdir -p "$VARIANTS"
git -C build/trees/sgl-kernel show upstream:sgl-kernel/csrc/elementwise/copy.cu > "$VARIANTS/stock_copy.cu" || status=1
BENCH_VARIANTS=(--variant "stock=$VARIANTS/stock_copy.cu")
if [ -n "${VARIANT_OLD:-}" ] && [ -f "$VARIANT_OLD" ]; then BENCH_VARIANTS+=(--variant "old=$VARIANT_OLD"); fi
(cd sgl_kernel_ext/python && $PY - "$VARIANTS" "${BENCH_VARIANTS[@]}" > "$WORK/variants.log" 2>&1 <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, str(Path.cwd().parents[1] / "benchmarks"))
import bench_copy
out = Path(sys.argv[1])
for spec in sys.argv[3::2]:
    name, _, path = spec.partition("=")
    bench_copy.build_variant(name, Path(path), out / "build")
    print("built", name, flush=True)
PY
) &
variants_pid=$!

step "pip wheel + install ./sgl_kernel_ext"
t0=$(date +%s)
DIST=$WORK/dist
$PY -m pip wheel --no-build-isolation --no-deps --no-index -w "$DIST" ./sgl_kernel_ext 2>&1 | tail -3 || status=1
echo "build took $(( $(date +%s) - t0 )) s"
ls -l "$DIST"; sha256sum "$DIST"/*.whl
$PY - "$DIST"/*.whl <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    for name in whl.namelist():
        if name.endswith((".dist-info/METADATA", ".dist-info/WHEEL")):
            for line in whl.read(name).decode().splitlines():
                if line.startswith(("Name:", "Version:", "Requires-Dist:", "Tag:")):
                    print(line)
PY
$PY -m pip install --no-deps --no-index --force-reinstall "$DIST"/*.whl 2>&1 | tail -1 || status=1
# from $WORK: the installed wheel, not the repo's sgl_kernel_ext/ folder
(cd "$WORK" && $PY - <<'PY'
import sgl_kernel_ext as s, torch
print("loaded", s.ensure_loaded(), s._C.__file__)
for name in ("copy_to_gpu_no_ce", "copy_list_to_gpu_no_ce", "copy_to_gpu_no_ce_fallback"):
    print(getattr(torch.ops.sgl_kernel_ext, name).default._schema)
print(s.copy_list_to_gpu_no_ce([1, 2, 3]))
PY
) || status=1
so=$($PY -c 'import sgl_kernel_ext._C as c; print(c.__file__)' 2>/dev/null)
cuobjdump --list-elf "$so"; cuobjdump --list-ptx "$so"
nm -D --undefined-only "$so" | grep -c ' U Py' ; nm -D --undefined-only "$so" | grep THPVariable_Wrap

if [ -z "${SKIP_TESTS:-}" ]; then
step "pytest tests/kernel (GPU tests, drift, bench smoke)"
SGL_KERNEL_EXT_DIFF_JSON=$OUT/differential$SUFFIX.json timeout 300 $PY -m pytest -v -rs -p no:cacheprovider \
  tests/kernel/test_kernel_gpu.py tests/kernel/test_kernel_patch_drift.py tests/kernel/test_kernel_bench_smoke.py 2>&1 | tee "$OUT/pytest.log" | grep -v "^$" ; rc=${PIPESTATUS[0]}
echo "pytest rc=$rc"; [ "$rc" = 0 ] || status=1

if [ -z "${SKIP_MEMCHECK:-}" ]; then
step "compute-sanitizer --tool memcheck: GPU tests + patched upstream test file"
SGL_KERNEL_EXT_UNDER_SANITIZER=1 timeout 240 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
  $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py 2>&1 | tee "$OUT/pytest_memcheck.log" \
  | grep -v "^$"; rc=${PIPESTATUS[0]}
echo "compute-sanitizer rc=$rc"; [ "$rc" = 0 ] || status=1
fi  # SKIP_MEMCHECK
fi  # SKIP_TESTS

if [ -n "${RELEASE_ARCHS:-}" ]; then
  step "pytest tests/kernel/test_kernel_gpu.py with CUDA_FORCE_PTX_JIT=1 (the PTX, JIT-compiled by the driver)"
  # torch's own kernels must have PTX for this to mean anything: probe them first
  if CUDA_FORCE_PTX_JIT=1 $PY -c 'import torch; x = torch.randint(0, 9, (64,), device="cuda"); assert torch.equal(x.cpu(), x.clone().cpu()); torch.full((8,), -1, dtype=torch.int32, device="cuda").fill_(2)'; then
    CUDA_FORCE_PTX_JIT=1 timeout 240 $PY -m pytest -v -rs -p no:cacheprovider tests/kernel/test_kernel_gpu.py 2>&1 \
      | tee "$OUT/pytest_ptx_jit.log" | grep -v "^$"; rc=${PIPESTATUS[0]}
    echo "pytest (PTX JIT) rc=$rc"; [ "$rc" = 0 ] || status=1
  else
    echo "CUDA_FORCE_PTX_JIT=1: torch's own kernels do not run (no PTX in torch's build): PTX run skipped"
    (cd "$WORK" && CUDA_FORCE_PTX_JIT=1 timeout 120 $PY - <<'PY'
import torch
import sgl_kernel_ext as s  # the installed wheel
s.ensure_loaded()
for n in (16, 17, 72, 512):
    vals = list(range(n))
    out = s.copy_list_to_gpu_no_ce(vals)  # our kernels only, from the compute_80 PTX
    torch.cuda.synchronize()
    print("PTX JIT: N =", n, "correct" if out.cpu().tolist() == vals else "WRONG")
PY
    ) || status=1
  fi
fi
# CARRIED_WHEEL: wheel files built elsewhere (e.g. the CI build) and carried here; each is
# installed into its own folder and loaded under this machine's torch. Reported, not counted in
# `status`: a wheel built against another torch (the shipped 2.14.1 one) is expected not to load.
for whl in ${CARRIED_WHEEL:-}; do
  step "the carried wheel $whl (sha256 $(sha256sum "$whl" | cut -c1-64)) under this torch"
  carried=$(mktemp -d -p "$WORK")
  $PY -m pip install -q --no-deps --no-index --target "$carried" "$whl" 2>&1 | tail -2
  (cd "$WORK" && PYTHONPATH=$carried $PY -c 'import sgl_kernel_ext as s; print(s.ensure_loaded())' 2>&1 | tail -3)
done
if [ -n "${SKIP_BENCH:-}" ]; then step "done (SKIP_BENCH): status=$status"; exit $status; fi

BENCH=$WORK/bench
mkdir -p "$BENCH"
wait $variants_pid; echo "variant builds: $(tr '\n' ' ' < "$WORK/variants.log" | tail -c 400)"
for values in counts full; do
  step "benchmarks/bench_copy.py --values $values (paired blocks, profiler, stock's op, sglang's loader)"
  timeout 240 $PY benchmarks/bench_copy.py --profile --values $values --stem bench_copy_$values$SUFFIX --out-dir "$BENCH" \
    "${BENCH_VARIANTS[@]}" --variant-build-dir "$VARIANTS/build" --sglang-root build/trees/sglang/python; rc=$?
  echo "bench rc=$rc"; [ "$rc" = 0 ] || status=1
done
step "benchmarks/launch_cost.cu: the C++ launch floor"
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$WORK/launch_cost" benchmarks/launch_cost.cu \
  && timeout 120 "$WORK/launch_cost" 20000 7 "$BENCH/launch_cost$SUFFIX.json" | tail -25; rc=$?
echo "launch_cost rc=$rc"; [ "$rc" = 0 ] || status=1
tar -C "$BENCH" -cf "$OUT/bench.tar" .

if [ -n "${NCU:-}" ]; then
  step "Nsight Compute: exact vs fallback kernel duration"
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:copy_to_gpu_no_ce --csv \
    $PY benchmarks/ncu_kernels.py > "$OUT/ncu_kernels.csv" 2> "$WORK/ncu.err"; rc=$?
  echo "ncu rc=$rc"; tail -3 "$WORK/ncu.err"; $PY benchmarks/ncu_kernels.py --summarize "$OUT/ncu_kernels.csv"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv

step "done: status=$status"
exit $status
