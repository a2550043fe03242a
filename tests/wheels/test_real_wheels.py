"""The patched sglang / sglang-kt wheels in dist/, installed for real next to the stock ones.

`make test-wheels` builds dist/ and installs each wheel with `pip install --no-deps --target`
under build/installed/{stock,patched}-<target>/ before this runs (scripts/install_wheels.sh).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT as REPO
from conftest import check_record

from sgl_overlay.gitutil import hash_bytes
from sgl_overlay.manifest import load_manifest
from sgl_overlay.wheels import shipped_changes

INSTALLED = REPO / "build" / "installed"

MANIFEST = load_manifest(REPO / "patches")
TARGETS = ["sglang", "sglang-kt"]


def _dirs(target: str) -> tuple[Path, Path]:
    stock, patched = INSTALLED / f"stock-{target}", INSTALLED / f"patched-{target}"
    if not patched.is_dir() or not stock.is_dir():
        pytest.fail(f"{patched} missing: run `make test-wheels` (it builds and installs the wheels)")
    return stock, patched


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in root.rglob("*")
            if p.is_file() and ".dist-info" not in str(p.relative_to(root)).split("/")[0]
            and "__pycache__" not in p.parts}


def _dist_info(root: Path, name: str) -> Path:
    (found,) = root.glob(f"{name.replace('-', '_')}-*.dist-info")
    return found


@pytest.mark.parametrize("target", TARGETS)
def test_local_label_and_record(target: str) -> None:
    _, patched = _dirs(target)
    version = f"{MANIFEST.get(target).version}+{MANIFEST.local_version}"
    info = _dist_info(patched, target)
    assert info.name == f"{target.replace('-', '_')}-{version}.dist-info"
    show = subprocess.run([sys.executable, "-m", "pip", "show", target], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(patched)})
    assert f"Version: {version}" in show.stdout, show.stdout + show.stderr
    assert check_record(patched, info) > 1000  # console scripts: pip --target puts them under bin/


@pytest.mark.parametrize("target", TARGETS)
def test_only_patched_files_differ(target: str) -> None:
    stock, patched = _dirs(target)
    s_files, p_files = _files(stock), _files(patched)
    changes = shipped_changes(MANIFEST.get(target))
    assert changes, f"the {target} series changes no shipped file"
    added = {rel for rel, blob in changes.items() if rel not in s_files}
    assert set(p_files) - set(s_files) == added
    assert set(s_files) - set(p_files) == {rel for rel, blob in changes.items() if blob is None}
    differing = {rel for rel in s_files.keys() & p_files.keys()
                 if s_files[rel].read_bytes() != p_files[rel].read_bytes()}
    assert differing == {rel for rel in changes if rel in s_files and changes[rel] is not None}
    for rel, blob in changes.items():
        if blob is not None:
            assert hash_bytes(p_files[rel].read_bytes()) == blob, f"{rel} is not the patch post-image"


@pytest.mark.parametrize("target", TARGETS)
def test_doctor_on_stock_and_patched(target: str) -> None:
    stock, patched = _dirs(target)
    base = [sys.executable, "-m", "sgl_overlay", "--patches", str(REPO / "patches"), "doctor", "--no-live"]
    bad = subprocess.run([*base, "--site", str(stock)], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"[MISSING] {target}:" in bad.stdout and "fix: pip install --no-deps --force-reinstall" in bad.stdout
    good = subprocess.run([*base, "--site", str(patched)], capture_output=True, text=True)
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"[ok] {target}:" in good.stdout and "MISSING" not in good.stdout
