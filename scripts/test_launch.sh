#!/usr/bin/env bash
# The README's install order, for real, in a fresh venv: stock-resolved dependencies of the
# patched sglang wheel, then sgl_kernel_ext; `pip show` carries the local label, doctor finds
# every fix, and `python -m sglang.launch_server --help` imports beside the real dependencies.
# Measured here: ~3 min and ~11 GB (torch 2.14.1 CUDA build, flashinfer, cutlass-dsl, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=build/launch-venv
PIP=(-m pip install -q --disable-pip-version-check --progress-bar off)
rm -rf "$VENV"
python3 -m venv "$VENV"
t0=$SECONDS
# The patched wheel for the venv's Python (the twin of the pinned wheel pip would pick) and its version.
python=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
read -r -a f <<< "$(.venv/bin/sgl-overlay wheels --print-names --out dist -t sglang --for-python "$python")"
wheel=${f[3]}
version=$(basename "$wheel" | cut -d- -f2)
"$VENV/bin/python" "${PIP[@]}" "$wheel"
"$VENV/bin/python" "${PIP[@]}" --no-deps dist/sgl_kernel_ext-*.whl
echo "full install: $((SECONDS - t0)) s, $(du -sh "$VENV" | cut -f1)"
"$VENV/bin/python" -m pip show sglang | grep -x "Version: $version"
(cd build && ../"$VENV"/bin/python -m sglang.launch_server --help > launch-help.txt 2>&1)
grep -q -- "--moe-a2a-backend" build/launch-help.txt
grep -q -- "--offload-group-size" build/launch-help.txt
echo "python -m sglang.launch_server --help: ok ($(wc -l < build/launch-help.txt) lines)"
.venv/bin/sgl-overlay doctor --python "$VENV/bin/python" --no-live
rm -rf "$VENV"   # 11 GB: keep CI's disk
