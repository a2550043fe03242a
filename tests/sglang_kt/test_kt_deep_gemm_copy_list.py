"""sglang-kt's DeepGEMM runner and sgl_kernel_ext (patches/sglang-kt/0002).

Without the copy engine (CPU OffloaderV2) ``copy_list_to_gpu_no_ce`` in
``srt/layers/moe/moe_runner/deep_gemm.py`` sends the per-expert counts (N = the rank's local
experts) to ``sgl_kernel.elementwise.copy_to_gpu_no_ce``; the sgl-kernel this fork ships has
kernels for N = 64 and 72 only (its ``copy.cu`` blob 09719f51), so N = 16 raises
``unexpected N`` on a GPU. The fork has no ``sglang.srt.plugins`` loader for sgl_kernel_ext's
plugin: the patch makes the runner use sgl_kernel_ext itself when it is importable.

The probe (kt_copy_list_probe.py, one subprocess per tree) imports the REAL stock or patched
``deep_gemm`` module and the real ``sgl_kernel_ext`` package of this repository, and reports
which op N = 16 counts reach, first without ``sgl_kernel_ext`` on the path, then with it.
Stand-ins, only for native libraries that cannot load on a CPU-only machine:
- ``sgl_kernel`` (kt_native_stubs; CUDA extension): its ``copy_to_gpu_no_ce`` records the call;
- ``sgl_kernel_ext._C`` (the built extension, links CUDA): ``list_copier`` records the call;
- ``torch.empty_like(..., device="cuda")`` allocates on the CPU (no CUDA device).
The in-patch unit test runs with its own sgl_kernel stand-in, as in the fork's CPU CI.
Cost: about 20 s per probe process (sglang's import), 15 s per in-patch test run.
"""

from __future__ import annotations

import json

import pytest

from helpers import REPO_ROOT, in_patch_test, run_probe, run_pytest

HERE = REPO_ROOT / "tests" / "sglang_kt"
PROBE = HERE / "kt_copy_list_probe.py"
TARGET = "sglang-kt"
REL = "test/registered/unit/layers/moe/test_deep_gemm_copy_list.py"
COUNTS = list(range(3, 19))  # 16 local experts: 256 experts on 16 EP ranks


@pytest.fixture(scope="module")
def probes(stock_root, patched_root):
    return {
        label: run_probe(root(TARGET), PROBE, json.dumps(COUNTS))
        for label, root in (("stock", stock_root), ("patched", patched_root))
    }


def _kernel_call():
    return [{"n": len(COUNTS), "dtype": "torch.int32", "values": COUNTS}]


def test_probe_imports_the_real_modules(probes, stock_root, patched_root):
    for label, root in (("stock", stock_root), ("patched", patched_root)):
        assert probes[label]["module"].startswith(str(root(TARGET))), probes[label]["module"]
        assert probes[label]["with_ext"]["ext_file"].startswith(str(REPO_ROOT / "sgl_kernel_ext"))


def test_stock_sends_n16_to_sgl_kernel_even_with_ext_installed(probes):
    stock = probes["stock"]
    for phase in ("without_ext", "with_ext"):
        assert stock[phase]["kernel"] == _kernel_call(), phase
        assert stock[phase]["ext"] == [], phase


def test_patched_without_ext_is_the_original_path(probes):
    assert probes["patched"]["without_ext"] == probes["stock"]["without_ext"]


def test_patched_with_ext_routes_to_sgl_kernel_ext(probes):
    with_ext = probes["patched"]["with_ext"]
    assert with_ext["kernel"] == []
    # sgl_kernel_ext's list entry point: its C copier, in front of its own tensor path
    assert with_ext["ext"] == [
        {
            "copier": "sgl_kernel_ext._C.copy_list_to_gpu_no_ce",
            "original": "_copy_list_through_tensor",
            "values": COUNTS,
        }
    ]
    assert with_ext["returned"] == "sgl_kernel_ext"


def test_in_patch_test_passes_on_patched(patched_root, tmp_path):
    proc = run_pytest([patched_root(TARGET)], in_patch_test(TARGET, REL), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "3 passed, 1 skipped" in out, out[-3000:]


def test_in_patch_test_fails_on_stock(stock_root, tmp_path):
    proc = run_pytest([stock_root(TARGET)], in_patch_test(TARGET, REL), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-6000:]
    # stock has no once-resolved sgl_kernel_ext lookup: every CPU case fails
    assert "3 failed, 1 skipped" in out, out[-3000:]
