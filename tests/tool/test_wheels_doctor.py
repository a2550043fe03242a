"""Patched wheels from a synthetic pinned wheel, installed for real; doctor on stock and patched envs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import check_record
from synth import HOOK_PY, MODEL_PY, cli, clone, git, make_overlay, pin_wheel


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _install(python: Path, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--disable-pip-version-check", str(wheel)], check=True)


def _site(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def test_patched_wheel_installs_and_doctor_tells(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    cache = tmp_path / "cache"
    stock = pin_wheel(ov, cache, {"sglang/model.py": MODEL_PY, "sglang/hook.py": HOOK_PY, "sglang/other.py": "o = 1\n"})
    base = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp_path / "trees")]
    for step in (["fetch", "--offline"], ["apply"], ["wheels", "--out", str(tmp_path / "dist")]):
        proc = cli(*base, *step)
        assert proc.returncode == 0, proc.stderr
    (built,) = (tmp_path / "dist").glob("*.whl")
    assert built.name == "sglang-1.0+overlay.1-py3-none-any.whl"

    py_stock, py_patched = _venv(tmp_path / "stock"), _venv(tmp_path / "patched")
    _install(py_stock, stock)
    _install(py_patched, built)
    site_s, site_p = _site(py_stock), _site(py_patched)
    dist_info = site_p / "sglang-1.0+overlay.1.dist-info"
    assert "Version: 1.0+overlay.1" in (dist_info / "METADATA").read_text()
    assert check_record(site_p, dist_info) >= 2
    tree = tmp_path / "trees" / "sglang" / "python" / "sglang"
    for name in ("model.py", "hook.py"):
        assert (site_p / "sglang" / name).read_bytes() == (tree / name).read_bytes()
        assert (site_p / "sglang" / name).read_bytes() != (site_s / "sglang" / name).read_bytes()
    assert (site_p / "sglang/other.py").read_bytes() == (site_s / "sglang/other.py").read_bytes()

    doc = ["--patches", str(ov.patches), "doctor", "--no-live", "--dist", str(tmp_path / "dist")]
    proc = cli(*doc, "--python", str(py_stock))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("[MISSING] sglang") == 2
    assert f"fix: pip install --no-deps --force-reinstall {tmp_path / 'dist' / built.name}" in proc.stdout
    proc = cli(*doc, "--python", str(py_patched))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("[ok] sglang") == 2 and "MISSING" not in proc.stdout


def test_wheel_from_user_checkout_uses_upstream_build(tmp_path: Path) -> None:
    """`wheels --checkout`: refuses before the series is in, then builds python/ with pip."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    (co / "python/pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "sglang"\nversion = "1.0"\n\n[tool.setuptools]\npackages = ["sglang"]\n'
    )
    (co / "python/sglang/__init__.py").write_text("")
    git(co, "add", "-A")
    git(co, "commit", "-qm", "local packaging")
    out = tmp_path / "dist"
    proc = cli("--patches", str(ov.patches), "wheels", "--checkout", str(co), "--out", str(out))
    assert proc.returncode == 1 and "is applicable in" in proc.stderr and "run `sgl-overlay apply" in proc.stderr
    assert cli("--patches", str(ov.patches), "apply", "--checkout", str(co)).returncode == 0
    proc = cli("--patches", str(ov.patches), "wheels", "--checkout", str(co), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (built,) = out.glob("sglang-1.0-*.whl")
    with zipfile.ZipFile(built) as zf:
        assert "line 10 fixed" in zf.read("sglang/model.py").decode()
