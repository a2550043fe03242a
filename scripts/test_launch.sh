#!/usr/bin/env bash
# README.md's "Installing on a GPU box" commands, as written, in a fresh venv whose folder holds dist/:
# stock sglang with its full dependency set, the patched twin, the tool, doctor (which
# must find every fix). Then `pip show` carries the local label and `python -m sglang.launch_server
# --help` imports beside the real dependencies.
# ~11 GB (torch 2.14.1 CUDA build, flashinfer, cutlass-dsl, ...), of which ~1.6 GB come from PyPI and the
# rest from this machine's local wheel store; 7-11 min on a loaded 2-core machine. The venv's pip is
# upgraded first, as a user's would be, and nothing is byte-compiled at install (PIP_COMPILE=no; pip reads
# PIP_NO_COMPILE=1 as compile=1): the commands run as written, and doctor's imports write the bytecode of
# what they load, which the launch command's then reuse (PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX
# are unset, as on a user's machine).
set -euo pipefail
export PIP_COMPILE=no
unset PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX
cd "$(dirname "$0")/.."
REPO=$PWD
BOX=build/launch-box   # the GPU box's folder: the venv and dist/
VENV=$BOX/venv
rm -rf "$BOX"
mkdir -p "$BOX"
ln -s "$REPO/dist" "$BOX/dist"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
t0=$SECONDS
# The first bash block after the section's heading.
block=$(awk '/^## Installing on a GPU box$/{on=1} on && /^```bash$/{code=1; next} code && /^```$/{exit} code' README.md)
[[ -n $block ]] || { echo "README.md: no bash block under '## Installing on a GPU box'" >&2; exit 1; }
printf '+ %s\n' "$block"
(cd "$BOX" && PATH="$REPO/$VENV/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off bash -euo pipefail -c "$block")
echo "README install: $((SECONDS - t0)) s, $(du -sh "$VENV" | cut -f1)"
python=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
read -r -a f <<< "$(.venv/bin/sgl-overlay wheels --print-names --out dist -t sglang --for-python "$python")"
"$VENV/bin/python" -m pip show sglang | grep -x "Version: $(basename "${f[3]}" | cut -d- -f2)"
(cd build && ../"$VENV"/bin/python -m sglang.launch_server --help > launch-help.txt 2>&1)
grep -q -- "--moe-a2a-backend" build/launch-help.txt
grep -q -- "--offload-group-size" build/launch-help.txt
echo "python -m sglang.launch_server --help: ok ($(wc -l < build/launch-help.txt) lines)"
rm -rf "$BOX"   # 11 GB: keep CI's disk
