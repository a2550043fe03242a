"""`sgl-overlay doctor`'s kernel findings, from the probe's data: the installed sgl_kernel's lengths
beside the lengths the target's patched DeepGEMM runner sends (sglang: 32, 64 and 72; sglang-kt: 64 and 72),
and the live copy."""

from __future__ import annotations

import pytest

from sgl_overlay.builds import routes
from sgl_overlay.builds.doctor import Finding, check_kernel

RUNNER_IN = Finding("sglang", "the DeepGEMM runner", True, "")
RUNNER_STOCK = Finding("sglang", "the DeepGEMM runner", False, "pip install --no-deps --force-reinstall dist/x.whl")


def _data(version: str | None, live=None, owners=("sglang-kernel",)) -> dict:
    kernel = {"version": version, "owners": list(owners)}
    return {"dists": {"sglang-kernel": {"version": version or "?", "root": "/x"}}, "live": live, "kernel": kernel}


# The kernels each target's releases pin or bundle: sglang 0.5.18-0.5.23 sglang-kernel 0.4.6.post1-0.4.10, sglang-kt
# 0.7.0-0.7.2 sgl-kernel 0.3.21 (kt-kernel's bundle of it: 0.3.21.post2).
PINNED = {"sglang": ("0.4.6.post1", "0.4.7", "0.4.9", "0.4.10"), "sglang-kt": ("0.3.21", "0.3.21.post2")}


@pytest.mark.parametrize("target, version", [(t, v) for t, versions in PINNED.items() for v in versions])
def test_every_pinned_kernel_has_what_the_patched_runner_sends(target, version):
    (finding,) = check_kernel(_data(version), RUNNER_IN, routes.RUNNER_LENGTHS[target])
    assert finding.ok, finding
    assert f"N = {', '.join(map(str, routes.KERNEL_N[version]))} only" in finding.what


def test_sglang_runner_sends_32_which_the_kt_kernel_lacks():
    (finding,) = check_kernel(_data("0.3.21.post2"), RUNNER_IN, routes.RUNNER_LENGTHS["sglang"])
    assert not finding.ok and finding.what.endswith("the patched DeepGEMM runner sends N = 32, 64, 72 only"), finding


def test_stock_runner_is_missing_the_fix_with_its_install_command():
    (finding,) = check_kernel(_data("0.3.21.post2", owners=("kt-kernel",)), RUNNER_STOCK, (64, 72))
    assert not finding.ok and finding.fix == RUNNER_STOCK.fix
    assert finding.what.startswith("sgl_kernel 0.3.21.post2 (in kt-kernel): copy_to_gpu_no_ce has N = 64, 72 only")


def test_no_sglang_installed_names_the_patched_wheels():
    (finding,) = check_kernel(_data("0.4.10"), None)
    assert not finding.ok and "patched sglang or sglang-kt" in finding.fix


def test_unknown_kernel_version_trusts_the_runner():
    (finding,) = check_kernel(_data(None), RUNNER_IN)
    assert finding.ok and "is not known here" in finding.what


@pytest.mark.parametrize("live,ok", [(True, True), (False, False), ("RuntimeError: unexpected N", False)])
def test_live_copy_through_the_runner(live, ok):
    findings = check_kernel(_data("0.4.10", live=live), RUNNER_IN)
    assert [f.ok for f in findings] == [True, ok]
    if not ok and isinstance(live, str):
        assert findings[1].fix.startswith(live)


def test_nothing_to_check_without_a_kernel():
    assert check_kernel({"dists": {}, "live": None, "kernel": None}, RUNNER_IN) == []
