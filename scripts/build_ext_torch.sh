#!/usr/bin/env bash
# sgl_kernel_ext for a torch other than the shipped wheel's (2.14.1): the torch an older sglang or the
# KTransformers fork pins, as PyPI builds it.
#   CUDA_HOME=<toolkit> scripts/build_ext_torch.sh <torch version> [--keep]
#     -> dist/torch<version>/sgl_kernel_ext-<version>+torch<version>-cp310-abi3-linux_x86_64.whl
#   2.13.0 (sglang 0.5.18-0.5.21): CUDA 13, e.g. CUDA_HOME=/usr/local/cuda-13.0
#   2.9.1 (sglang-kt 0.7.x): CUDA 12 (12.9 for the release architectures' sm_100f); PyPI's
#     nvidia-cuda-nvcc-cu12 wheels ship ptxas but no nvcc, so it must come from NVIDIA's installer.
# Not part of `make`: the venv (that torch and its CUDA wheels, ~5-7 GB) lives in build/ext-torch<version>
# and is deleted at the end unless --keep (a kept one is reused). torch's extension build refuses an nvcc
# of another CUDA major than torch's own. The wheel's version is pyproject.toml's with the local label
# +torch<version>, its Requires-Dist torch==<version>; its own folder keeps dist/sgl_kernel_ext-*.whl
# (the torch 2.14.1 wheel) one file.
set -euo pipefail
CUDA=${CUDA_HOME:+$(realpath -m "$CUDA_HOME")}
cd "$(dirname "$0")/.."
source scripts/find_python.sh

TORCH=${1:-}
KEEP=${2:-}
[ -n "$TORCH" ] && [ "$TORCH" != --keep ] ||
  { echo "$0: usage: CUDA_HOME=<toolkit> $0 <torch version, e.g. 2.13.0 or 2.9.1> [--keep]" >&2; exit 1; }
ROOT=$PWD/build/ext-torch$TORCH
OUT=dist/torch$TORCH

[ -n "$CUDA" ] && [ -x "$CUDA/bin/nvcc" ] ||
  { echo "$0: set CUDA_HOME to a CUDA toolkit with bin/nvcc (got '${CUDA:-unset}'); PyPI's nvidia-cuda-nvcc-cu12 has no nvcc" >&2; exit 1; }
RELEASE=$("$CUDA/bin/nvcc" --version | sed -n -E 's/.*release ([0-9]+\.[0-9]+),.*/\1/p')
echo "nvcc: $CUDA/bin/nvcc (CUDA $RELEASE)"
export CUDA_HOME=$CUDA
# The release architectures (_build.RELEASE_GENCODES) unless TORCH_CUDA_ARCH_LIST says otherwise
# (with CUDA 12.8, which lacks sm_100f: e.g. TORCH_CUDA_ARCH_LIST="8.0 9.0a 12.0a").
[ -n "${TORCH_CUDA_ARCH_LIST:-}" ] || export SGL_KERNEL_EXT_ARCHS=release

[ -x "$ROOT/venv/bin/python" ] || "$(find_python 3.12)" -m venv "$ROOT/venv"
VPY=$ROOT/venv/bin/python
"$VPY" -m pip install -q --no-cache-dir "torch==$TORCH" setuptools wheel numpy
# torch's extension build refuses an nvcc of another CUDA major than its own, after minutes of setup:
# say so first. No CUDA at all is a +cpu wheel (a local --find-links can offer one).
TORCH_CUDA=$("$VPY" -c "import torch; print(torch.version.cuda or 'none')")
[ "${TORCH_CUDA%%.*}" = "${RELEASE%%.*}" ] ||
  { echo "$0: the torch $TORCH in $ROOT/venv is built for CUDA $TORCH_CUDA, $CUDA/bin/nvcc is CUDA ${RELEASE:-?}: set CUDA_HOME to a CUDA ${TORCH_CUDA%%.*}.x toolkit (a 'none' is a +cpu torch: delete $ROOT and install from PyPI)" >&2; exit 1; }

# A copy of the sources with the local version label (the checkout stays as it is).
SRC=$ROOT/src
rm -rf "$SRC" && mkdir -p "$SRC"
cp -r sgl_kernel_ext/csrc sgl_kernel_ext/python sgl_kernel_ext/setup.py sgl_kernel_ext/pyproject.toml "$SRC/"
rm -rf "$SRC"/python/*.egg-info
sed -i -E "s/^version = \"([^\"+]+)\"$/version = \"\\1+torch$TORCH\"/" "$SRC/pyproject.toml"
grep -q "^version = \".*+torch$TORCH\"$" "$SRC/pyproject.toml" ||
  { echo "$0: no 'version = \"X\"' line in sgl_kernel_ext/pyproject.toml to label +torch$TORCH" >&2; exit 1; }

rm -rf "$OUT" && mkdir -p "$OUT"
PATH="$CUDA/bin:$PATH" "$VPY" -m pip wheel -q --no-build-isolation --no-deps -w "$OUT" "$SRC"
ls -l "$OUT"/*.whl && sha256sum "$OUT"/*.whl
rm -rf "$SRC"

# On this machine (CPU): pip takes it by its pinned version (its torch pin satisfied, nothing downloaded),
# the ops register, _C.read_values reads tests/kernel/list_inputs.py's inputs as stock's caller does,
# and the library holds the release architectures' SASS (_build.RELEASE_GENCODES).
VERSION=$(sed -n -E 's/^version = "([^"]+)"$/\1/p' sgl_kernel_ext/pyproject.toml)+torch$TORCH
"$VPY" -m pip uninstall -q -y sgl-kernel-ext 2>/dev/null || true
"$VPY" -m pip install -q --no-index --find-links "$OUT" "sgl-kernel-ext==$VERSION"
(cd "$ROOT" && CUDA_VISIBLE_DEVICES="" PYTHONPATH="$OLDPWD/tests/kernel" "$VPY" - <<'PY'
import importlib.metadata as md, json, os, re, subprocess, sys
import list_inputs, numpy as np, torch
import sgl_kernel_ext
from sgl_kernel_ext import _build

how = sgl_kernel_ext.ensure_loaded()
ops = [n for n in ("copy_to_gpu_no_ce", "copy_list_to_gpu_no_ce", "copy_to_gpu_no_ce_fallback")
       if hasattr(torch.ops.sgl_kernel_ext, n)]
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}); sgl-kernel-ext {md.version('sgl-kernel-ext')},"
      f" requires {md.requires('sgl-kernel-ext')}; loaded: {how}; ops: {ops}; MAX_N {sgl_kernel_ext._C.MAX_N}")
assert len(ops) == 3, ops
out = subprocess.run([sys.executable, os.path.join(os.environ["PYTHONPATH"], "probe_list_inputs.py")],
                     capture_output=True, text=True, check=True).stdout
out = json.loads(out.strip().splitlines()[-1])
read = out["summary"]["read"]
print("read_values:", {k: v for k, v in read.items()}, "read:",
      sorted(c for c, r in out["rows"].items() if r["read"]["got"][0] == "ok-cpu"))
assert read["wrong_value"] == read["accepts_refused"] == read["system_error"] == 0, read
for name in ("wrapper", "no_ce_caller", "pinned_caller"):
    s = out["summary"][name]
    assert s["same"] == s["cases"] == len(out["rows"]), (name, s)
print("wrapper, no_ce_caller, pinned_caller: every case as stock's caller")

lib = sgl_kernel_ext._C.__file__
exe = os.path.join(os.environ["CUDA_HOME"], "bin", "cuobjdump")
if not os.path.exists(exe):
    import triton
    exe = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
elf = set(re.findall(r"\.(sm_\w+)\.cubin", subprocess.run([exe, "--list-elf", lib], capture_output=True, text=True, check=True).stdout))
ptx = set(re.findall(r"\.(sm_\w+)\.ptx", subprocess.run([exe, "--list-ptx", lib], capture_output=True, text=True, check=True).stdout))
want = {code.replace("100f", "100") for _, code in _build.RELEASE_GENCODES if code.startswith("sm_")}
print(f"cuobjdump ({exe.split('/nvidia/')[-1]}): SASS {sorted(elf)}, PTX {sorted(ptx)}")
if os.environ.get("SGL_KERNEL_EXT_ARCHS") == "release":
    assert elf == want and ptx == {"sm_80"}, (elf, want, ptx)
PY
)
[ "$KEEP" = --keep ] || rm -rf "$ROOT"
