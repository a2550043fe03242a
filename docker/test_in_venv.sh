#!/usr/bin/env bash
# docker/Dockerfile's RUN step, as written, in a clean venv that stands in for the lmsysorg/sglang
# image: its python3 is the venv's, its sglang the stock pinned wheel (installed --no-deps: what the
# step reads is the installed files, not the image's dependency set), its working folder holds dist/
# where the COPY puts it. Then `pip show` carries the local label, and docs/install.md quotes the Dockerfile
# verbatim. Outside the repository; 1-3 min on a loaded 2-core machine (most of it installing sglang
# twice), ~250 MB, removed after.
set -euo pipefail
# byte-compiling sglang takes most of the time and checks nothing here (pip reads PIP_NO_COMPILE=1 as compile=1)
export PIP_COMPILE=no
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
t0=$SECONDS
python3 -m venv "$WORK/venv"
PY=$WORK/venv/bin/python
version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
read -r -a f <<< "$(.venv/bin/sgl-overlay wheels --print-names --out dist -t sglang --for-python "$version")"
"$PY" -m pip install -q --disable-pip-version-check --no-deps "${f[2]}"   # the image's stock sglang
mkdir "$WORK/sgl-overlay"
ln -s "$PWD/dist" "$WORK/sgl-overlay/dist"   # WORKDIR /opt/sgl-overlay, COPY . dist/

# The RUN instruction: from `RUN ` to the first line that does not end in a backslash.
step=$(awk '/^RUN /{on=1; sub(/^RUN /, "")} on{print; if (!/\\$/) exit}' docker/Dockerfile)
echo "+ $step"
(cd "$WORK/sgl-overlay" && PATH="$WORK/venv/bin:$PATH" sh -c "$step")
"$PY" -m pip show sglang | grep -x "Version: $(basename "${f[3]}" | cut -d- -f2)"

# docs/install.md shows the Dockerfile as it is.
awk '/^```dockerfile$/{on=1; next} on && /^```$/{exit} on' docs/install.md | diff - docker/Dockerfile
echo "docker/Dockerfile's RUN step in a clean venv: ok ($((SECONDS - t0)) s)"
