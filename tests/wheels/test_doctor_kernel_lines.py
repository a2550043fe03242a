"""doctor on the real test venvs: .venvs/sglang (no sglang-kernel) and .venvs/sglang-kt (kt-kernel's bundled
sgl_kernel), each with the stock or patched install of build/installed (scripts/install_wheels.sh). The fix is
the installed DeepGEMM runner (sglang 0003, sglang-kt 0002), which sends its counts in lengths the installed
kernel has: doctor finds it from the installed sglang / sglang-kt alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT as REPO
from sgl_overlay.engine.manifest import load_manifest
from sgl_overlay.engine.series import Series

MANIFEST = load_manifest(REPO / "patches")
INSTALLED = REPO / "build" / "installed"
VENVS = {
    "sglang": REPO / ".venvs" / "sglang" / "bin" / "python",
    "sglang-kt": REPO / ".venvs" / "sglang-kt" / "bin" / "python",
}
SENT = "; the patched DeepGEMM runner sends N = 64, 72 only"


def _facts(python: Path) -> dict:
    """What the venv holds, read with its own interpreter: torch's version, and kt-kernel's when installed."""
    if not python.is_file():
        pytest.fail(f"{python} missing: run `make venvs`")
    probe = (
        "import importlib.metadata as md, json\n"
        "v = {}\n"
        "for n in ('torch', 'kt-kernel'):\n"
        "    try: v[n] = md.version(n)\n"
        "    except md.PackageNotFoundError: pass\n"
        "print(json.dumps(v))"
    )
    return json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout)


def _site(target: str, kind: str) -> Path:
    index = INSTALLED / "index.json"
    if not index.is_file():
        pytest.fail(f"{index} missing: run `make test-wheels` (it builds and installs the wheels)")
    first = MANIFEST.get(target).wheels[0].file
    entry = next(e for e in json.loads(index.read_text()) if e["stock"] == first)
    return REPO / entry[f"{kind}_dir"]


def _doctor(target: str, kind: str) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGL_OVERLAY_PATCHES")}
    cmd = [sys.executable, "-m", "sgl_overlay", "--patches", str(REPO / "patches"), "doctor", "--no-live"]
    cmd += ["--python", str(VENVS[target]), "--site", str(_site(target, kind)), "--dist", str(REPO / "dist")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, proc.stdout.splitlines()


def _state(lines: list[str], what: str) -> str:
    """ok or MISSING for the one finding that starts with `what`."""
    (found,) = [line for line in lines if line.strip().split("] ", 1)[-1].startswith(f"sgl-kernel: {what}")]
    return found.strip()[1:].split("]")[0]


def _kt_kernel_line() -> str:
    """kt-kernel's bundled sgl_kernel: the payload version its manifest names, and the lengths the fork's
    copy.cu (kvcache-ai/sglang 04653fa8, blob 09719f51) has exact kernels for."""
    assert "kt-kernel" in _facts(VENVS["sglang-kt"]), "kt-kernel is not in .venvs/sglang-kt: run `make venvs`"
    return "sgl_kernel 0.3.21.post2 (in kt-kernel): copy_to_gpu_no_ce has N = 64, 72 only"


def _caller_line(target: str) -> str:
    """The start of doctor's line for the target's patch of the DeepGEMM runner (its caller of the kernel)."""
    series = Series.read(MANIFEST.get(target))
    (patch,) = [p for p in series.patches if any(str(t).endswith("moe_runner/deep_gemm.py") for t in p.touched())]
    return f"{target}: {patch.subject} ("


@pytest.mark.parametrize("target", ["sglang", "sglang-kt"])
def test_stock_runner_lacks_the_fix(target) -> None:
    rc, lines = _doctor(target, "stock")
    assert rc == 1
    if target == "sglang-kt":  # .venvs/sglang has no sglang-kernel (it needs a CUDA driver to import)
        assert _state(lines, _kt_kernel_line()) == "MISSING", lines
    assert any(_caller_line(target) in line and "[MISSING]" in line for line in lines), lines


@pytest.mark.parametrize("target", ["sglang", "sglang-kt"])
def test_patched_runner_is_the_fix_with_the_installed_kernel(target) -> None:
    rc, lines = _doctor(target, "patched")
    assert rc == 0, lines
    if target == "sglang-kt":
        assert _state(lines, _kt_kernel_line() + ", others raise `unexpected N`" + SENT) == "ok", lines
    assert any(_caller_line(target) in line and "[ok]" in line for line in lines), lines
    assert not any("route:" in line or "sgl-kernel-ext" in line for line in lines), lines
