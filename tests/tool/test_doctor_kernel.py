"""`sgl-overlay doctor`'s kernel findings: the extension, its plugin entry point and
the fast caller path (sgl_kernel_ext >= 0.2.0), from the probe's data."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from sgl_overlay import routes
from sgl_overlay.doctor import EXT_DIST, check_kernel

EXT_PYPROJECT = Path(__file__).resolve().parents[2] / "sgl_kernel_ext" / "pyproject.toml"

EP = ["sgl_kernel_ext_copy_to_gpu_no_ce", "sgl_kernel_ext.sglang_plugin:register"]


def _findings(version: str | None, plugins=(EP,), live=None):
    dists = {"sglang-kernel": {"version": "0.4.10", "root": "/x"}}
    if version:
        dists[EXT_DIST] = {"version": version, "root": "/x"}
    return {
        f.what.split(":")[0]: f.ok
        for f in check_kernel({"dists": dists, "plugins": list(plugins), "live": live}, Path("dist"))
    }


def test_current_extension_reports_the_fast_path():
    version = tomllib.loads(EXT_PYPROJECT.read_text())["project"]["version"]
    found = _findings(version, live=True)
    assert found["fast caller path"] is True
    assert all(found.values()), found


def test_older_extension_lacks_the_fast_path():
    found = _findings("0.1.0")
    assert found["fast caller path"] is False
    assert found[f"{EXT_DIST} installed (copy_to_gpu_no_ce for any N <= 512)"] is True


def test_no_extension_no_fast_path_finding():
    found = _findings(None, plugins=())
    assert "fast caller path" not in found and not any(found.values())


def test_no_way_in_without_plugins_or_the_kt_runner(tmp_path):
    """An sglang without sglang.srt.plugins that is not the KT fork: only a rebuilt sgl-kernel helps."""
    route = routes.route_of("sglang", {"version": "0.5.10", "root": str(tmp_path), "requires": []}, "2.9.1")
    assert route.way == routes.Way.NONE
    data = {"dists": {}, "plugins": [], "live": None, "kernel": {"version": "0.3.21", "owners": ["sgl-kernel"]}}
    found = {f.what: f for f in check_kernel(data, Path("dist"), route)}
    assert not any(f.ok for f in found.values()), found
    assert "sgl-kernel-ext" not in found["no sglang.srt.plugins and not the KT fork: no way in for sgl_kernel_ext"].fix


@pytest.mark.parametrize(
    "pin,torch,allowed",
    [("==2.9.1", "2.9.1+cu128", True), ("==2.14.1", "2.9.1", False), (None, "2.9.1", True), ("==2.9.1", None, False)],
)
def test_torch_pin_against_the_installed_torch(pin, torch, allowed):
    assert routes.pin_allows(pin, torch) is allowed
    assert (
        routes.torch_pin(["numpy", f"torch{pin}" if pin else "torchvision==0.24.1", 'torch==1.0; os_name == "x"'])
        == pin
    )


def test_extension_load_is_checked_only_where_torch_is():
    data = {"dists": {EXT_DIST: {"version": "0.2.0", "root": "/x", "requires": ["torch==2.14.1"]}}, "plugins": [EP]}
    without = [f.what for f in check_kernel({**data, "live": None, "torch": None}, Path("dist"))]
    assert not any("loads with torch" in what for what in without), without
    found = {f.what: f for f in check_kernel({**data, "live": None, "torch": "2.9.1"}, Path("dist"))}
    load = found["sgl-kernel-ext 0.2.0 (built for torch==2.14.1) loads with torch 2.9.1"]
    assert not load.ok and load.fix.startswith("build sgl_kernel_ext against torch 2.9.1")


def _ext_wheel(folder: Path, version: str, torch: str) -> Path:
    """A minimal sgl_kernel_ext wheel, built by `wheel pack`, whose METADATA requires torch==<torch>."""
    import subprocess
    import sys

    tree = folder / "tree" / f"sgl_kernel_ext-{version}"
    info = tree / f"sgl_kernel_ext-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sgl-kernel-ext\nVersion: {version}\nRequires-Dist: torch=={torch}\n"
    )
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp310-abi3-linux_x86_64\n"
    )
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "wheel", "pack", "-d", str(folder), str(tree)], check=True, capture_output=True
    )
    return next(folder.glob(f"sgl_kernel_ext-{version.replace('+', '*')}-*.whl"))


def test_install_fix_names_the_wheel_built_for_the_installed_torch(tmp_path):
    """dist/ holds the shipped wheel (torch 2.14.1) and a torch2.13.0/ one: the fix for a missing
    extension installs the wheel whose torch pin the installed torch meets, never one that would make
    pip replace torch, and names the build script where dist/ has none."""
    dist = tmp_path / "dist"
    shipped = _ext_wheel(dist, "0.2.0", "2.14.1")
    _ext_wheel(dist / "torch2.13.0", "0.2.0+torch2.13.0", "2.13.0")
    shutil.rmtree(dist / "tree"), shutil.rmtree(dist / "torch2.13.0" / "tree")

    def fix(torch):
        data = {"dists": {"sglang-kernel": {"version": "0.4.7", "root": "/x"}}, "plugins": [], "live": None}
        found = check_kernel({**data, "torch": torch}, dist)
        return next(f.fix for f in found if f.what.startswith(f"{EXT_DIST} installed"))

    assert fix("2.14.1+cu130") == f"pip install {shipped}"
    assert (
        fix("2.13.0") == f'pip install --no-index --find-links {dist / "torch2.13.0"} "{EXT_DIST}==0.2.0+torch2.13.0"'
    )
    assert fix("2.11.0").startswith("build sgl_kernel_ext against torch 2.11.0: scripts/build_ext_torch.sh")
    assert fix(None) == f"pip install {dist}/sgl_kernel_ext-*.whl"
