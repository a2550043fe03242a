"""sglang-kt's DeepGEMM runner: copy_list_to_gpu_no_ce (patches/sglang-kt/0002) over the lengths
the fork's kernel has.

Without the copy engine (CPU OffloaderV2) ``copy_list_to_gpu_no_ce`` in
``srt/layers/moe/moe_runner/deep_gemm.py`` sends the per-expert counts (N = the rank's local
experts) to ``sgl_kernel.elementwise.copy_to_gpu_no_ce``; the sgl-kernel this fork ships has
kernels for N = 64 and 72 only (its ``copy.cu`` blob 09719f51), so N = 16 raises
``unexpected N`` on a GPU. The patched caller sends every N in those two lengths.

The probe (tests/copy_list_probe.py, one subprocess per tree) imports the REAL stock or patched
``deep_gemm`` module and calls its caller for every N in 1..513 and the special inputs of
tests/kernel/list_inputs.py over a stand-in op with the fork's length rule (64, 72) and one with
every length (the reference). Stand-ins, only for native libraries that cannot load on a
CPU-only machine: ``sgl_kernel`` at import (kt_native_stubs; CUDA extension) and, during the
calls, the op itself and ``torch.empty_like(..., device="cuda")`` allocating on the CPU.
The in-patch unit test runs with its own sgl_kernel stand-in, as in the fork's CPU CI.
Cost: about 20 s per probe process (sglang's import), 15 s per in-patch test run.
"""

from __future__ import annotations

import json

import pytest

from copy_list_probe import IN_PATCH_OUTCOMES, IN_PATCH_TEST, expected, launches_ok
from helpers import REPO_ROOT, check_in_patch_test, run_probe, side_by_side

PROBE = REPO_ROOT / "tests" / "copy_list_probe.py"
STUBS = REPO_ROOT / "tests" / "sglang_kt" / "kt_native_stubs"
TARGET = "sglang-kt"
RULES = {"kt": [64, 72], "every": "every"}


@pytest.fixture(scope="module")
def probes(stock_root, patched_root):
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    return side_by_side(
        {
            label: lambda root=root: run_probe(root, PROBE, json.dumps(RULES), extra_path=(STUBS,))
            for label, root in roots.items()
        }
    )


def test_probe_imports_the_real_modules(probes, stock_root, patched_root):
    for label, root in (("stock", stock_root), ("patched", patched_root)):
        assert probes[label]["module"].startswith(str(root(TARGET))), probes[label]["module"]


def test_patched_sends_every_count_in_the_fewest_launches_of_64_or_72(probes):
    counts = probes["patched"]["kt"]["counts"]
    assert {n: c for n, c in counts.items() if c["result"] != "ok"} == {}
    for n, c in counts.items():
        n = int(n)
        assert launches_ok(n, [64, 72], c["launches"]), (n, c["launches"])


def test_stock_refuses_every_other_length(probes):
    counts = probes["stock"]["kt"]["counts"]
    for n in (16, 17, 32, 100, 513):
        assert counts[str(n)] == {"result": "refused", "error": "unexpected N", "launches": []}, n
    assert sorted(int(n) for n, c in counts.items() if c["result"] == "ok") == [64, 72]


def test_patched_answers_as_stock_where_stock_had_the_kernel(probes):
    patched, stock = probes["patched"]["kt"], probes["stock"]
    differ = {
        case: (row["outcome"], want)
        for case, row in patched["special"].items()
        if row["outcome"] != (want := expected(stock["kt"]["special"][case], stock["every"]["special"][case]))
    }
    assert differ == {}
    assert len(patched["special"]) >= 60


@pytest.mark.parametrize("label", ["patched", "stock"])
def test_in_patch_test(label, stock_root, patched_root, tmp_path):
    root = patched_root(TARGET) if label == "patched" else stock_root(TARGET)
    check_in_patch_test(root, TARGET, IN_PATCH_TEST, tmp_path, IN_PATCH_OUTCOMES[label])
