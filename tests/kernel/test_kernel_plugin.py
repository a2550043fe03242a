"""The opt-in route for a stock sgl-kernel: sgl_kernel_ext's sglang plugin.

Runs sglang 0.5.23's real plugin loader (`sglang.srt.plugins.load_plugins`, from
the stock tree) with the entry point sgl_kernel_ext declares, laid out as pip
installs it (a dist-info with entry_points.txt generated from pyproject.toml).
Stand-in: `sgl_kernel` itself (a CUDA library that cannot load on a CPU) is a
two-file package with the same layout as sgl-kernel 0.4.10's python side
(`sgl_kernel.elementwise.copy_to_gpu_no_ce`, re-exported by `sgl_kernel`), and the
extension's op (it needs a GPU) is replaced by a recorder in the probe.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import kernel_patch as kp
import pytest

from helpers import run_probe

HERE = Path(__file__).resolve().parent
RUNNER = "sglang.srt.layers.moe.moe_runner.deep_gemm"
HOOKED = ("sgl_kernel.elementwise.copy_to_gpu_no_ce", f"{RUNNER}.copy_list_to_gpu_no_ce", f"{RUNNER}.copy_list_to_gpu")

STUB_INIT = "from sgl_kernel.elementwise import copy_to_gpu_no_ce  # noqa: F401\n"
STUB_ELEMENTWISE = """STOCK_CALLS = []


def copy_to_gpu_no_ce(input, output):
    STOCK_CALLS.append("stock")
"""


def _layout(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "sgl_kernel").mkdir(parents=True)
    (site / "sgl_kernel" / "__init__.py").write_text(STUB_INIT)
    (site / "sgl_kernel" / "elementwise.py").write_text(STUB_ELEMENTWISE)
    project = tomllib.loads((kp.EXT_DIR / "pyproject.toml").read_text())["project"]
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, eps in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in eps.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


def _probe(root, tmp_path, *args, **env):
    site = _layout(tmp_path)
    extra = {"SGLANG_PLUGINS": "", "SGL_KERNEL_EXT_DISABLE": "", **env}
    return run_probe(
        root, HERE / "probe_plugin.py", *args, extra_env=extra, extra_path=(site, kp.EXT_DIR / "python", HERE)
    )


def test_pyproject_declares_the_plugin():
    project = tomllib.loads((kp.EXT_DIR / "pyproject.toml").read_text())["project"]
    eps = project["entry-points"]["sglang.srt.plugins"]
    assert list(eps.values()) == ["sgl_kernel_ext.sglang_plugin:register"]


def test_plugin_routes_sgl_kernel_to_extension(stock_root, tmp_path):
    result = _probe(stock_root("sglang"), tmp_path)
    assert result["replaced"] is True
    assert result["calls"] == ["ext", "ext"]  # sgl_kernel.elementwise.* and sgl_kernel.*
    assert result["stock_calls"] == []
    # the caller imports the name inside the function, so it gets the replacement
    assert ["sgl_kernel.elementwise", ["copy_to_gpu_no_ce"]] in result["caller_imports"]
    # stock sglang: the no-copy-engine caller is the extension's list copier, installed
    # as it is (a class, no registry wrapper), in front of the stock caller
    assert result["list_calls"] == [[1, 2, 3]] and result["list_results"] == ["fast"]
    assert result["callers_are_types"] == [True] and result["no_ce_wraps_stock"] is True


def test_plugin_replaces_both_callers_of_the_patched_runner(patched_root, tmp_path):
    result = _probe(patched_root("sglang"), tmp_path)
    assert result["list_calls"] == [[1, 2, 3], [4] * 512]
    assert result["list_results"] == ["fast", "fast"]
    assert result["pinned_wraps_stock"] is True and result["no_ce_wraps_stock"] is True
    assert result["callers_are_types"] == [True, True]
    assert {t: result["hooks"][t] for t in HOOKED} == dict.fromkeys(HOOKED, 1)


def test_loading_plugins_twice_is_harmless(patched_root, tmp_path):
    # vLLM documents that plugins may be loaded more than once per process; here sglang's
    # loader runs twice (its own once-guard reset), so register() is called twice.
    result = _probe(patched_root("sglang"), tmp_path, "twice")
    assert {t: result["hooks"][t] for t in HOOKED} == dict.fromkeys(HOOKED, 1)
    assert not [w for w in result["warnings"] if "REPLACE" in w], result["warnings"]
    assert result["calls"] == ["ext", "ext"] and result["stock_calls"] == []
    assert result["list_calls"] == [[1, 2, 3], [4] * 512] and result["list_results"] == ["fast", "fast"]
    assert result["pinned_wraps_stock"] is True


@pytest.mark.parametrize(
    "env", [{"SGL_KERNEL_EXT_DISABLE": "1"}, {"SGLANG_PLUGINS": "some_other_plugin"}], ids=["disable", "whitelist"]
)
def test_plugin_can_be_turned_off(stock_root, tmp_path, env):
    result = _probe(stock_root("sglang"), tmp_path, **env)
    assert result["replaced"] is False
    assert result["calls"] == []
    assert result["stock_calls"] == ["stock", "stock"]
    assert result["list_calls"] == [] and "fast" not in result["list_results"]
