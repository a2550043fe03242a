"""`sgl-overlay doctor`'s kernel findings: the extension, its plugin entry point and
the fast caller path (sgl_kernel_ext >= 0.2.0), from the probe's data."""

from __future__ import annotations

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
