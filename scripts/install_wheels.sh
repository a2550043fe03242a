#!/usr/bin/env bash
# Install every pinned wheel and its patched twin from dist/ side by side, each with
# `pip install --no-deps --target build/installed/{stock,patched}-<target>[-<python tag>]` and the
# wheel's own tags (so cp312/cp313 install here too), for the tests that run against installed code:
# tests/wheels, and the sglang / sglang-kt suites via SGL_OVERLAY_{STOCK,PATCHED}_ROOT_<TARGET>
# (the first pinned wheel of a target, without a tag suffix: cp311 for sglang, this machine's
# Python; see docs/DESIGN.md). build/installed/index.json lists what went where.
# Then build/installed/venv-cp312: a real Python 3.12 venv with the patched cp312 sglang wheel
# (pip, --no-deps) and the tool (uv, editable), for `pip show` and `sgl-overlay doctor` as a Python 3.12 user runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
TOOL=.venv/bin/sgl-overlay
PIP_FLAGS=(-q --disable-pip-version-check --no-input --progress-bar off)
rm -rf build/installed
mkdir -p build/installed

names=$($TOOL wheels --print-names --out dist)  # target, python tag, stock wheel, patched wheel, pip tag options
entries=()
previous=""
while read -r -a f; do
  target=${f[0]} tag=${f[1]}
  suffix=""
  [[ $target == "$previous" ]] && suffix="-$tag"  # the first pinned wheel of a target has no suffix
  previous=$target
  stock_dir=build/installed/stock-$target$suffix patched_dir=build/installed/patched-$target$suffix
  $PY -m pip install "${PIP_FLAGS[@]}" --no-deps --no-compile --target "$stock_dir" "${f[@]:4}" "${f[2]}"
  $PY -m pip install "${PIP_FLAGS[@]}" --no-deps --no-compile --target "$patched_dir" "${f[@]:4}" "${f[3]}"
  entries+=("{\"target\": \"$target\", \"python_tag\": \"$tag\", \"stock\": \"$(basename "${f[2]}")\", \"stock_dir\": \"$stock_dir\", \"patched\": \"$(basename "${f[3]}")\", \"patched_dir\": \"$patched_dir\"}")
  echo "installed $(basename "${f[2]}") and $(basename "${f[3]}") under $stock_dir, $patched_dir"
done <<< "$names"
(IFS=,; echo "[${entries[*]}]") > build/installed/index.json

source scripts/find_python.sh
py312=$(find_python 3.12)
read -r -a f <<< "$($TOOL wheels --print-names --out dist -t sglang --for-python 3.12)"
VENV=build/installed/venv-cp312
"$py312" -m venv "$VENV"
source scripts/uv_args.sh
uv_install "$VENV/bin/python" -e ./python  # the tool and its dependencies; uv resolves them in seconds, pip in a minute
"$VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" --no-deps "${f[3]}"  # the wheel as a user installs it
echo "installed $(basename "${f[3]}") and sgl-overlay into $VENV ($("$VENV/bin/python" --version))"
