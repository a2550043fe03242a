"""sglang-kt's DeepGEMM runner: copy_list_to_gpu_no_ce (patches/sglang-kt/0002, sglang 0003 with
the fork's lengths) over the lengths the fork's kernel has.

The sgl-kernel this fork ships has ``copy_to_gpu_no_ce`` kernels for N = 64 and 72 only (its
``copy.cu`` blob 09719f51), so N = 16 raises ``unexpected N`` on a GPU. The probe
(tests/copy_list_probe.py, one subprocess per tree) imports the REAL stock or patched
``deep_gemm`` module and calls its caller for every N in 1..513 and the special inputs of
tests/kernel/list_inputs.py over a stand-in op with the fork's lengths and one with every
length (the reference). Stand-ins, only for native libraries that cannot load on a CPU-only
machine: ``sgl_kernel`` at import (kt_native_stubs; CUDA extension) and, during the calls, the
op itself and ``torch.empty_like(..., device="cuda")`` allocating on the CPU. The in-patch unit
test runs with its own sgl_kernel stand-in, as in the fork's CPU CI.
Cost: about 20 s per probe process (sglang's import), 15 s per in-patch test run.
"""

from __future__ import annotations

import json

import pytest

from copy_list_probe import IN_PATCH_OUTCOMES, IN_PATCH_TEST, check_as_stock, check_patched, check_stock
from helpers import REPO_ROOT, check_in_patch_test, run_probe, side_by_side

PROBE = REPO_ROOT / "tests" / "copy_list_probe.py"
STUBS = REPO_ROOT / "tests" / "sglang_kt" / "kt_native_stubs"
TARGET = "sglang-kt"
LENGTHS = [64, 72]


@pytest.fixture(scope="module")
def probes(stock_root, patched_root):
    rules = json.dumps({"released": LENGTHS, "every": "every"})
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    return side_by_side(
        {label: lambda root=root: run_probe(root, PROBE, rules, extra_path=(STUBS,)) for label, root in roots.items()}
    )


def test_probe_imports_the_real_modules(probes, stock_root, patched_root):
    for label, root in (("stock", stock_root), ("patched", patched_root)):
        assert probes[label]["module"].startswith(str(root(TARGET))), probes[label]["module"]


def test_patched_sends_every_count_in_the_fork_lengths(probes):
    check_patched(probes["patched"]["released"], LENGTHS)


def test_stock_in_the_patched_role_fails(probes):
    """What the patched package is held to fails on stock: the suite tells the two apart (an
    installed stock wheel passed off as patched included, whose probe this is in the wheel run)."""
    with pytest.raises(AssertionError):
        check_patched(probes["stock"]["released"], LENGTHS)


def test_stock_refuses_every_other_length(probes):
    check_stock(probes["stock"]["released"], LENGTHS)


def test_patched_answers_as_stock_where_stock_had_the_kernel(probes):
    check_as_stock(probes["patched"]["released"], probes["stock"]["released"], probes["stock"]["every"])


@pytest.mark.parametrize("label", ["patched", "stock"])
def test_in_patch_test(label, stock_root, patched_root, tmp_path):
    root = patched_root(TARGET) if label == "patched" else stock_root(TARGET)
    check_in_patch_test(root, TARGET, IN_PATCH_TEST, tmp_path, IN_PATCH_OUTCOMES[label])
