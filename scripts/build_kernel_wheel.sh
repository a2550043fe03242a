#!/usr/bin/env bash
# The sgl_kernel_ext wheel, built once for dist/ (`make wheels`) and for tests/kernel/test_kernel_build.py,
# which checks this wheel and this log (and runs this script itself when pytest runs alone):
#   scripts/build_kernel_wheel.sh PYTHON OUT
# PYTHON: a Python with the torch the wheel is for, setuptools and nvcc on PATH. OUT gets the wheel and
# build.log (pip wheel -v: the compile commands); the build runs on a copy of sgl_kernel_ext/ under OUT,
# so nothing is reused from an earlier build and the checkout stays as it is.
set -euo pipefail
PY=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute, not resolved: a venv's python
OUT=$(realpath -m "$2")
cd "$(dirname "$0")/.."
rm -rf "$OUT" && mkdir -p "$OUT"
SRC=$OUT/src
cp -r sgl_kernel_ext "$SRC"
rm -rf "$SRC/build" "$SRC"/python/*.egg-info
find "$SRC" \( -name __pycache__ -o -name '*.so' \) -prune -exec rm -rf {} +
export MAX_JOBS=${MAX_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
if ! "$PY" -m pip wheel -v --no-build-isolation --no-deps -w "$OUT" "$SRC" > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log" >&2
  echo "$0: the sgl_kernel_ext build failed; the whole log is $OUT/build.log" >&2
  exit 1
fi
rm -rf "$SRC"
ls "$OUT"/sgl_kernel_ext-*.whl
