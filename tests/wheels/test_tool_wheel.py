"""The tool's own wheel in dist/: it carries patches/ byte for byte, and installed into a fresh venv
outside the repository it runs `doctor` from that copy, against the stock and patched installs of
build/installed (scripts/install_wheels.sh). A checkout's tool reads the checkout's patches/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import REPO_ROOT as REPO
from sgl_overlay.builds.wheels import patched_wheel_name
from sgl_overlay.engine.manifest import default_patches_dir, load_manifest

PATCHES = REPO / "patches"
PACKAGED = "sgl_overlay/patches/"  # where the wheel carries them
MANIFEST = load_manifest(PATCHES)
PIP = ("-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-input", "--no-compile")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _tool_wheel() -> Path:
    found = sorted((REPO / "dist").glob("sgl_overlay-*-py3-none-any.whl"))
    if len(found) != 1:
        pytest.fail(
            f"want one sgl_overlay wheel in {REPO / 'dist'}, found {[p.name for p in found]}: run `make wheels`"
        )
    return found[0]


def _first_installed(target: str) -> dict:
    """build/installed's entry of the target's first pinned wheel (this machine's Python)."""
    index = REPO / "build" / "installed" / "index.json"
    if not index.is_file():
        pytest.fail(f"{index} missing: run `make test-wheels` (it builds and installs the wheels)")
    return next(e for e in json.loads(index.read_text()) if e["stock"] == MANIFEST.get(target).wheels[0].file)


@pytest.fixture(scope="module")
def tool_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the repository with the tool wheel installed (its dependencies from the index)."""
    venv = tmp_path_factory.mktemp("tool-wheel") / "venv"
    assert not venv.is_relative_to(REPO)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), *PIP, str(_tool_wheel())], check=True)
    return venv


def _run(venv: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("SGL_OVERLAY_PATCHES", "PYTHONPATH")}
    return subprocess.run(
        [str(venv / "bin" / "sgl-overlay"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, **(env or {})},
    )


def test_tool_wheel_carries_patches_byte_for_byte() -> None:
    with zipfile.ZipFile(_tool_wheel()) as wheel:
        packaged = {n.removeprefix(PACKAGED): wheel.read(n) for n in wheel.namelist() if n.startswith(PACKAGED)}
    source = _files(PATCHES)
    assert sorted(packaged) == sorted(source), "the wheel's patches/ lists other files: run `make wheels` again"
    assert [rel for rel in source if packaged[rel] != source[rel]] == []
    variants = [rel for rel in source if "/variants/" in rel]
    assert "manifest.toml" in source and variants, "the manifest and the variants are packaged too"


def test_installed_tool_reads_its_packaged_copy(tool_venv: Path, tmp_path: Path) -> None:
    """From any folder, the repository's included: the installed tool's default is the copy it carries."""
    probe = "from sgl_overlay.engine.manifest import load_manifest; print(load_manifest().path)"
    for cwd in (tmp_path, REPO):
        proc = subprocess.run(
            [str(tool_venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd=cwd, check=True
        )
        path = Path(proc.stdout.strip())
        assert path.is_relative_to(tool_venv) and path.name == "manifest.toml", proc.stdout
        assert _files(path.parent) == _files(PATCHES)


@pytest.mark.parametrize("target", [t.name for t in MANIFEST.targets.values() if t.wheels])
def test_installed_tool_doctor_on_stock_and_patched(tool_venv: Path, tmp_path: Path, target: str) -> None:
    """The fix line names the patched wheel in ./dist, where the README's commands run."""
    entry = _first_installed(target)
    stock, patched = REPO / entry["stock_dir"], REPO / entry["patched_dir"]
    n = len(MANIFEST.get(target).patches)
    bad = _run(tool_venv, "doctor", "--no-live", "--site", str(stock), cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    fix = f"fix: pip install --no-deps --force-reinstall {tmp_path / 'dist' / entry['patched']}"
    assert bad.stdout.count(f"[MISSING] {target}:") == n and bad.stdout.count(fix) == 1, bad.stdout  # printed once
    good = _run(tool_venv, "doctor", "--no-live", "--site", str(patched), cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.count(f"[ok] {target}:") == n and "MISSING" not in good.stdout


def test_patches_option_and_variable_override_the_packaged_copy(tool_venv: Path, tmp_path: Path) -> None:
    """A copy of patches/ with another local label: doctor's fix line then names that label's wheel."""
    other = tmp_path / "patches"
    shutil.copytree(PATCHES, other)
    manifest = other / "manifest.toml"
    text = manifest.read_text()
    assert f'local_version = "{MANIFEST.local_version}"' in text
    manifest.write_text(text.replace(f'local_version = "{MANIFEST.local_version}"', 'local_version = "overlay.99"'))
    stock = REPO / _first_installed("sglang")["stock_dir"]
    wanted = patched_wheel_name(MANIFEST.get("sglang").wheels[0].file, "overlay.99")
    doctor = ("doctor", "--no-live", "--site", str(stock))
    for proc in (
        _run(tool_venv, "--patches", str(other), *doctor, cwd=tmp_path),
        _run(tool_venv, *doctor, cwd=tmp_path, env={"SGL_OVERLAY_PATCHES": str(other)}),
    ):
        assert proc.returncode == 1 and f"dist/{wanted}" in proc.stdout, proc.stdout + proc.stderr


def _package_files(venv: Path) -> list[str]:
    """What the installed package holds (compiled bytecode aside)."""
    (package,) = venv.glob("lib/python*/site-packages/sgl_overlay")
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if "__pycache__" not in p.parts)


def test_installed_tool_keeps_trees_and_wheels_in_the_user_cache(tool_venv: Path, tmp_path: Path) -> None:
    """With no clone, fetch / apply / verify lay the trees out under $XDG_CACHE_HOME/sgl-overlay (else
    ~/.cache/sgl-overlay), never inside site-packages; --trees and --cache still override."""
    work, xdg, home = tmp_path / "work", tmp_path / "xdg", tmp_path / "home"
    work.mkdir()
    before = _package_files(tool_venv)
    cached = {"XDG_CACHE_HOME": str(xdg), "HOME": str(home)}
    for command in ("fetch", "apply", "verify"):
        proc = _run(tool_venv, command, "-t", "sgl-kernel", cwd=work, env=cached)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified sgl-kernel" in proc.stdout
    assert (xdg / "sgl-overlay" / "trees" / "sgl-kernel" / ".git").is_dir()
    offline = _run(tool_venv, "fetch", "-t", "sglang-kt", "--offline", cwd=work, env=cached)
    assert offline.returncode == 1 and f"the wheel cache {xdg / 'sgl-overlay' / 'wheels'}, " in offline.stderr, (
        offline.stderr
    )

    no_xdg = _run(tool_venv, "fetch", "-t", "sgl-kernel", cwd=work, env={"XDG_CACHE_HOME": "", "HOME": str(home)})
    assert no_xdg.returncode == 0, no_xdg.stderr
    assert f"{home / '.cache' / 'sgl-overlay' / 'trees' / 'sgl-kernel'} laid out" in no_xdg.stdout

    given = ("--trees", str(tmp_path / "t"), "--cache", str(tmp_path / "c"))
    proc = _run(tool_venv, *given, "fetch", "-t", "sgl-kernel", cwd=work, env=cached)
    assert proc.returncode == 0 and f"{tmp_path / 't' / 'sgl-kernel'} laid out" in proc.stdout, proc.stderr
    offline = _run(tool_venv, *given, "fetch", "-t", "sglang-kt", "--offline", cwd=work, env=cached)
    assert f"the wheel cache {tmp_path / 'c'}, " in offline.stderr, offline.stderr
    assert _package_files(tool_venv) == before and sorted(p.name for p in work.iterdir()) == []


def test_checkout_tool_reads_the_checkouts_patches() -> None:
    """In a checkout the package's patches/ is a symlink to the checkout's, so the editable tool (this
    venv's) reads the series being edited, not a copy."""
    link = REPO / "python" / "sgl_overlay" / "patches"
    assert link.is_symlink() and os.readlink(link) == "../../patches"
    if "SGL_OVERLAY_PATCHES" in os.environ:
        pytest.skip("SGL_OVERLAY_PATCHES is set")
    assert default_patches_dir().resolve() == PATCHES
    assert load_manifest().path == PATCHES / "manifest.toml"
