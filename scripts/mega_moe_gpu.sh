#!/usr/bin/env bash
# benchmarks/mega_moe_sm90_bench.py in one device call: sglang's shared SM90 MegaMoE path
# (build/trees/sglang's post-image mega_moe.py, mega_moe_sm90.py, environ.py) on DeepGEMM's
# real kernel (sgl-deep-gemm 0.1.5.post1 with apache-tvm-ffi 0.1.11, carried as wheels).
#
# Here (after `make trees`):
#   scripts/mega_moe_gpu.sh [--main DIR] [--carry REL] [--jit-cache FILE]
#     lays DIR/REL (default: this checkout, build/mega_moe_gpu; a git-ignored folder) with the
#     three files, the harness, this script and the wheels, then prints the device call.
#     --main: the checkout the device call sends (a helper's worktree sends /work/main);
#     --jit-cache: a dg_jit_cache.tgz an earlier call returned (skips DeepGEMM's JIT compile).
# There (what the printed call runs):
#   bash REL/mega_moe_gpu.sh --device [harness args]
#     results, run.log and dg_jit_cache.tgz under $OUT; exit status 1 on any problem. Then the
#     same grid with DeepGEMM's swap-AB off (DG_SM90_FP8_SWAP_AB=0) under $OUT/swap_ab_off
#     (SWAP_AB_OFF_RUN=0 skips it).
set -u -o pipefail

if [ "${1:-}" = "--device" ]; then
  shift
  HERE=$(cd "$(dirname "$0")" && pwd)
  OUT=${OUT:-$(mktemp -d)}
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/run.log") 2>&1
  echo "=== environment ($(date -u +%FT%TZ))"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1
  cat "$HERE/src/SOURCES"
  SITE=/tmp/mega_moe_site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$HERE"/whl/*.whl || exit 1
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  # DeepGEMM's _C.so needs libnvrtc/libcublas(Lt)/libcudart 13 and libtvm_ffi by soname.
  LIBS=$(python3 -c 'import glob, os, torch; print(":".join(sorted({os.path.dirname(p) for p in glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "**", "lib*.so*"), recursive=True)})))')
  export LD_LIBRARY_PATH=$SITE/tvm_ffi/lib:$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
  export CUDA_HOME
  # nvcc's host compiler: the system gcc (the image's newer /opt/gcc is not nvcc 13's).
  [ -x /usr/bin/gcc ] && export NVCC_CCBIN=/usr/bin/gcc
  export DG_JIT_CACHE_DIR=/tmp/dg_jit_cache PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  mkdir -p "$DG_JIT_CACHE_DIR"
  if [ -f "$HERE/dg_jit_cache.tgz" ]; then tar xzf "$HERE/dg_jit_cache.tgz" -C /tmp && echo "JIT cache restored"; fi
  echo "=== deep_gemm import"
  python3 -c 'import deep_gemm, tvm_ffi; print("deep_gemm", deep_gemm.__version__, deep_gemm.__file__, "tvm_ffi", tvm_ffi.__version__)' || exit 1
  echo "=== bench ($(date -u +%T))"
  python3 "$HERE/mega_moe_sm90_bench.py" --src "$HERE/src" --stock-src "$HERE/stock" --out "$OUT" "$@"
  rc=$?
  echo "=== bench rc $rc ($(date -u +%T))"
  if [ "${SWAP_AB_OFF_RUN:-1}" = 1 ]; then
    # DeepGEMM picks swap-AB from each call's rows: the same grid with it off everywhere.
    echo "=== bench with DG_SM90_FP8_SWAP_AB=0 ($(date -u +%T))"
    DG_SM90_FP8_SWAP_AB=0 python3 "$HERE/mega_moe_sm90_bench.py" --src "$HERE/src" --out "$OUT/swap_ab_off" \
      --no-graph --repeats 20 "$@" > "$OUT/swap_ab_off.log" 2>&1
    echo "swap-AB-off run rc $? ($(date -u +%T)); $OUT/swap_ab_off/"
    tail -25 "$OUT/swap_ab_off.log"
  fi
  tar czf "$OUT/dg_jit_cache.tgz" -C /tmp dg_jit_cache
  [ "$(stat -c %s "$OUT/dg_jit_cache.tgz")" -lt 16000000 ] || rm -f "$OUT/dg_jit_cache.tgz"
  exit $rc
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MAIN=$ROOT
CARRY=build/mega_moe_gpu
CACHE=
while [ $# -gt 0 ]; do
  case $1 in
    --main) MAIN=$2; shift 2 ;;
    --carry) CARRY=$2; shift 2 ;;
    --jit-cache) CACHE=$2; shift 2 ;;
    *) echo "mega_moe_gpu.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
TREE=$ROOT/build/trees/sglang
PY=${PYTHON:-$ROOT/.venvs/sglang/bin/python}
[ -x "$PY" ] || PY=python3
# The files the harness loads for real (its REAL), under sglang's python/.
FILES=$("$PY" "$ROOT/benchmarks/mega_moe_sm90_bench.py" --print-real | sed 's|^|python/|') || exit 1
[ -d "$TREE/.git" ] || { echo "mega_moe_gpu.sh: $TREE is missing; run \`make trees\` first" >&2; exit 1; }
git -C "$MAIN" check-ignore -q "$CARRY/x" || {
  echo "mega_moe_gpu.sh: $MAIN/$CARRY is not ignored by git there; pick an ignored --carry (or add it to .git/info/exclude)" >&2
  exit 1
}
DEST=$MAIN/$CARRY
rm -rf "$DEST" && mkdir -p "$DEST/src" "$DEST/whl" || exit 1
for f in $FILES; do
  mkdir -p "$DEST/src/$(dirname "${f#python/}")" "$DEST/stock/$(dirname "${f#python/}")" || exit 1
  cp "$TREE/$f" "$DEST/src/${f#python/}" || exit 1
  git -C "$TREE" show "upstream:$f" > "$DEST/stock/${f#python/}" || exit 1
done
{
  echo "build/trees/sglang $(git -C "$TREE" rev-parse HEAD): $(git -C "$TREE" log -1 --format=%s)"
  git -C "$TREE" diff --quiet HEAD -- $FILES && echo "files as committed there:" || echo "files WITH UNCOMMITTED CHANGES there:"
  for f in $FILES; do echo "  $(git -C "$TREE" hash-object "$TREE/$f") $f"; done
  echo "stock (upstream):"
  for f in $FILES; do echo "  $(git -C "$TREE" rev-parse "upstream:$f") $f"; done
} > "$DEST/src/SOURCES"
cp "$ROOT/benchmarks/mega_moe_sm90_bench.py" "$ROOT/scripts/mega_moe_gpu.sh" "$DEST/" || exit 1
for spec in sgl-deep-gemm==0.1.5.post1 apache-tvm-ffi==0.1.11; do
  name=${spec%%==*}; name=${name//-/_}
  found=$(ls "$MAIN"/.whl/"$name"-"${spec##*==}"-*.whl 2>/dev/null | head -1)
  if [ -n "$found" ]; then
    cp "$found" "$DEST/whl/"
  else
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 \
      -d "$DEST/whl" "$spec" || exit 1
  fi
done
[ -z "$CACHE" ] || cp "$CACHE" "$DEST/dg_jit_cache.tgz" || exit 1
cat "$DEST/src/SOURCES"
du -sh "$DEST"
echo "device call (run tool):"
echo "  command: bash $CARRY/mega_moe_gpu.sh --device"
echo "  carry: [\"$CARRY\"]   timeout_s: 600"
