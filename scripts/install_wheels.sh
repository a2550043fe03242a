#!/usr/bin/env bash
# Install the stock pinned wheels and the patched ones from dist/ side by side, each with
# `pip install --no-deps --target build/installed/{stock,patched}-<target>`, for the tests that
# run against installed code (tests/wheels, and the sglang / sglang-kt suites via
# SGL_OVERLAY_{STOCK,PATCHED}_ROOT_<TARGET>; see docs/DESIGN.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
rm -rf build/installed
for target in sglang sglang-kt; do
  # The exact pinned file and its patched twin, as the manifest names them.
  read -r stock patched < <($PY - "$target" <<'PYEOF'
import sys
from sgl_overlay.wheels import patched_wheel_name
from sgl_overlay.manifest import load_manifest
m = load_manifest()
print(f".cache/wheels/{m.get(sys.argv[1]).wheel}", f"dist/{patched_wheel_name(m.get(sys.argv[1]), m.local_version)}")
PYEOF
)
  $PY -m pip install -q --disable-pip-version-check --no-deps --no-compile --target "build/installed/stock-$target" "$stock"
  $PY -m pip install -q --disable-pip-version-check --no-deps --no-compile --target "build/installed/patched-$target" "$patched"
  echo "installed $target: $(basename "$stock") and $(basename "$patched")"
done
