#!/usr/bin/env bash
# Install every pinned wheel and its patched twin from dist/ side by side, each with
# `pip install --no-deps --target build/installed/{stock,patched}-<target>[-<python tag>]` and the
# wheel's own tags (so cp312/cp313 install here too), for the tests that run against installed code:
# tests/wheels, and the sglang / sglang-kt suites via SGL_OVERLAY_{STOCK,PATCHED}_ROOT_<TARGET>
# (the first pinned wheel of a target, without a tag suffix: cp311 for sglang, this machine's
# Python; see docs/DESIGN.md). build/installed/index.json lists what went where.
# Then build/installed/venv-cp312: a real Python 3.12 venv with the patched cp312 sglang wheel
# (--no-deps) and the tool, for `pip show` and `sgl-overlay doctor` as a Python 3.12 user runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PIP_FLAGS=(-q --disable-pip-version-check --no-input --progress-bar off)
rm -rf build/installed
$PY - <<'PYEOF'
import json
import subprocess
import sys
from pathlib import Path

from packaging.utils import parse_wheel_filename

from sgl_overlay.fetch import pip_tag_args
from sgl_overlay.manifest import load_manifest
from sgl_overlay.wheels import patched_wheel_name

m = load_manifest()
index = []
for target in m.targets.values():
    for i, pin in enumerate(target.wheels):
        tag = "-".join(sorted({t.interpreter for t in parse_wheel_filename(pin.file)[3]}))
        entry = {"target": target.name, "python_tag": tag}
        for kind, wheel in (("stock", Path(".cache/wheels") / pin.file),
                            ("patched", Path("dist") / patched_wheel_name(pin.file, m.local_version))):
            dest = Path("build/installed") / (f"{kind}-{target.name}" + (f"-{tag}" if i else ""))
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                            "--no-compile", "--target", str(dest), *pip_tag_args(pin.file), str(wheel)], check=True)
            entry |= {kind: wheel.name, f"{kind}_dir": str(dest)}
        index.append(entry)
        print(f"installed {entry['stock']} and {entry['patched']} under {entry['stock_dir']}, {entry['patched_dir']}")
Path("build/installed/index.json").write_text(json.dumps(index, indent=1) + "\n")
PYEOF

# A Python 3.12: $PYTHON312, python3.12 on PATH, or pyenv's (this machine image has 3.12.1 there).
py312=""
for cand in ${PYTHON312:-} python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
  if "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then py312=$cand; break; fi
done
if [[ -z $py312 ]]; then
  echo "install_wheels.sh: no Python 3.12 found; install one (pyenv install 3.12) or set PYTHON312=/path/to/python3.12" >&2
  exit 1
fi
wheel312=$($PY -c 'import sys; from sgl_overlay.manifest import load_manifest; from sgl_overlay.wheels import patched_wheel_name, wheel_for_python
m = load_manifest(); pin = wheel_for_python(m.get("sglang"), (3, 12))
print(f"dist/{patched_wheel_name(pin.file, m.local_version)}" if pin else sys.exit("no sglang wheel for Python 3.12 is pinned"))')
VENV=build/installed/venv-cp312
"$py312" -m venv "$VENV"
"$VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" -e ./python 2>&1 | { grep -v "^WARNING: Location 'file://" || true; } >&2
"$VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" --no-deps "$wheel312"
echo "installed $(basename "$wheel312") and sgl-overlay into $VENV ($("$VENV/bin/python" --version))"
