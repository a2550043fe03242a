"""The patched sglang / sglang-kt wheels in dist/, installed for real next to the stock ones.

`make test-wheels` builds dist/ and, before this runs, installs every pinned wheel and its
patched twin with `pip install --no-deps --target` (their own tags) and makes a Python 3.12
venv with the patched cp312 wheel (scripts/install_wheels.sh; build/installed/index.json
says what went where).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT as REPO
from helpers import check_record
from sgl_overlay.builds.wheels import patched_wheel_name, shipped_changes, wheel_for_python
from sgl_overlay.engine.gitutil import hash_bytes
from sgl_overlay.engine.manifest import load_manifest
from sgl_overlay.engine.series import Series

INSTALLED = REPO / "build" / "installed"
VENV_312 = INSTALLED / "venv-cp312"

MANIFEST = load_manifest(REPO / "patches")
WHEELS = [(t.name, pin.file) for t in MANIFEST.targets.values() for pin in t.wheels]
IDS = [file for _, file in WHEELS]


def _installed(stock_file: str) -> dict:
    index = INSTALLED / "index.json"
    if not index.is_file():
        pytest.fail(f"{index} missing: run `make test-wheels` (it builds and installs the wheels)")
    (entry,) = [e for e in json.loads(index.read_text()) if e["stock"] == stock_file] or [None]
    if entry is None:
        pytest.fail(f"{stock_file} is pinned but not installed: run `make test-wheels` again")
    return entry


def _dirs(stock_file: str) -> tuple[Path, Path]:
    entry = _installed(stock_file)
    return REPO / entry["stock_dir"], REPO / entry["patched_dir"]


def _files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in root.rglob("*")
        if p.is_file() and ".dist-info" not in str(p.relative_to(root)).split("/")[0] and "__pycache__" not in p.parts
    }


def _dist_info(root: Path, name: str) -> Path:
    (found,) = root.glob(f"{name.replace('-', '_')}-*.dist-info")
    return found


def _wheel_tags(dist_info: Path) -> list[str]:
    return [
        line.split(": ", 1)[1] for line in (dist_info / "WHEEL").read_text().splitlines() if line.startswith("Tag: ")
    ]


@pytest.mark.parametrize("target,wheel", WHEELS, ids=IDS)
def test_local_label_and_record(target: str, wheel: str) -> None:
    stock, patched = _dirs(wheel)
    assert _installed(wheel)["patched"] == patched_wheel_name(wheel, MANIFEST.local_version)
    version = f"{MANIFEST.get(target).version}+{MANIFEST.local_version}"
    info = _dist_info(patched, target)
    assert info.name == f"{target.replace('-', '_')}-{version}.dist-info"
    assert _wheel_tags(info) == _wheel_tags(_dist_info(stock, target)), "the patched wheel changed its tags"
    show = subprocess.run(
        [sys.executable, "-m", "pip", "show", target],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(patched)},
    )
    assert f"Version: {version}" in show.stdout, show.stdout + show.stderr
    assert check_record(patched, info) > 1000  # console scripts: pip --target puts them under bin/


@pytest.mark.parametrize("target,wheel", WHEELS, ids=IDS)
def test_only_patched_files_differ(target: str, wheel: str) -> None:
    """Against its own stock twin: only the series' files differ, and they are its post-image blobs
    (so every Python tag's wheel carries the same patched bytes)."""
    stock, patched = _dirs(wheel)
    s_files, p_files = _files(stock), _files(patched)
    changes = shipped_changes(Series.read(MANIFEST.get(target)))
    assert changes, f"the {target} series changes no shipped file"
    added = {rel for rel, blob in changes.items() if rel not in s_files}
    assert set(p_files) - set(s_files) == added
    assert set(s_files) - set(p_files) == {rel for rel, blob in changes.items() if blob is None}
    differing = {
        rel for rel in s_files.keys() & p_files.keys() if s_files[rel].read_bytes() != p_files[rel].read_bytes()
    }
    assert differing == {rel for rel in changes if rel in s_files and changes[rel] is not None}
    for rel, blob in changes.items():
        if blob is not None:
            assert hash_bytes(p_files[rel].read_bytes()) == blob, f"{rel} is not the patch post-image"


@pytest.mark.parametrize("target,wheel", WHEELS, ids=IDS)
def test_doctor_on_stock_and_patched(target: str, wheel: str) -> None:
    stock, patched = _dirs(wheel)
    base = [sys.executable, "-m", "sgl_overlay", "--patches", str(REPO / "patches"), "doctor", "--no-live"]
    bad = subprocess.run([*base, "--site", str(stock)], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"[MISSING] {target}:" in bad.stdout and "fix: pip install --no-deps --force-reinstall" in bad.stdout
    good = subprocess.run([*base, "--site", str(patched)], capture_output=True, text=True)
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"[ok] {target}:" in good.stdout and "MISSING" not in good.stdout


def test_stock_twins_differ_only_in_native_extensions() -> None:
    """Why one series serves every Python tag: sglang's pinned wheels hold the same files but
    for their compiled extensions (`*.cpython-3XX-*.so`), one set per tag."""
    pins = MANIFEST.get("sglang").wheels
    assert len(pins) >= 2
    roots = [_dirs(pin.file)[0] for pin in pins]
    first = _files(roots[0])
    for pin, root in zip(pins[1:], roots[1:]):
        other = _files(root)
        py_first = {rel for rel in first if not rel.endswith(".so")}
        assert py_first == {rel for rel in other if not rel.endswith(".so")}, pin.file
        assert all(first[rel].read_bytes() == other[rel].read_bytes() for rel in py_first), pin.file
        tag = _installed(pin.file)["python_tag"]
        assert other.keys() - py_first and all(f".cpython-{tag[2:]}-" in rel for rel in other.keys() - py_first)


def test_cp312_wheel_in_a_python_312_venv() -> None:
    """The patched cp312 wheel, installed with --no-deps into a real Python 3.12 venv: pip show
    carries the local label, the files are the post-images (pip refuses the cp311 twin there),
    doctor run there finds every fix, and names the cp312 wheel as the fix for a stock cp312 install."""
    python = VENV_312 / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{python} missing: run `make test-wheels` (scripts/install_wheels.sh makes it)")
    version = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert version == ["3", "12"]
    target = MANIFEST.get("sglang")
    show = subprocess.run([str(python), "-m", "pip", "show", "sglang"], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert f"Version: {target.version}+{MANIFEST.local_version}" in show.stdout.splitlines()
    site = Path(next(line for line in show.stdout.splitlines() if line.startswith("Location: ")).split(": ", 1)[1])
    info = _dist_info(site, "sglang")
    assert _wheel_tags(info) == ["cp312-cp312-manylinux_2_34_x86_64"]
    assert check_record(site, info) > 1000
    for rel, blob in shipped_changes(Series.read(target)).items():
        assert hash_bytes((site / rel).read_bytes()) == blob, rel

    # Why the cp312 twin exists: pip refuses the cp311 wheel on Python 3.12.
    cp311 = REPO / "dist" / patched_wheel_name(wheel_for_python(target, (3, 11)).file, MANIFEST.local_version)
    refused = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", str(cp311)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "is not a supported wheel on this platform" in refused.stderr, refused.stderr

    tool = VENV_312 / "bin" / "sgl-overlay"
    good = subprocess.run([str(tool), "doctor", "--no-live"], capture_output=True, text=True)
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"environment: {python}" in good.stdout and good.stdout.count("[ok] sglang:") == len(target.patches)
    cp312 = wheel_for_python(target, (3, 12)).file
    bad = subprocess.run(
        [str(tool), "doctor", "--no-live", "--site", str(_dirs(cp312)[0])], capture_output=True, text=True
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    fix = f"fix: pip install --no-deps --force-reinstall {REPO / 'dist' / patched_wheel_name(cp312, MANIFEST.local_version)}"
    assert bad.stdout.count(fix) == 1 and bad.stdout.count("fix: the one above") == len(target.patches) - 1, bad.stdout
