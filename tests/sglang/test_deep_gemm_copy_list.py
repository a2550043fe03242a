"""The DeepGEMM runner's copy_list_to_gpu_no_ce (patches/sglang/0003) over the lengths sglang's
released kernels have (sglang-kernel 0.4.10, pinned by sglang 0.5.23: 32, 64, 72).

The probe (tests/copy_list_probe.py, one subprocess per package) imports the REAL stock or
patched ``deep_gemm`` module and calls its ``copy_list_to_gpu_no_ce`` for every N in 1..513 and
for tests/kernel/list_inputs.py's special inputs, over a stand-in for sgl-kernel's
``copy_to_gpu_no_ce`` with those lengths, and one with every length (the reference: stock's
answer where stock was only missing a kernel). The patch's own unit test runs with the other patches'
(test_in_patch_tests.py). Cost: about 20 s per probe process (sglang's import).
"""

from __future__ import annotations

import json

import pytest

from copy_list_probe import check_as_stock, check_patched, check_stock
from helpers import REPO_ROOT, run_probe, side_by_side

PROBE = REPO_ROOT / "tests" / "copy_list_probe.py"
TARGET = "sglang"
LENGTHS = [32, 64, 72]


@pytest.fixture(scope="module")
def probes(stock_root, patched_root):
    rules = json.dumps({"released": LENGTHS, "every": "every"})
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    return side_by_side({label: lambda root=root: run_probe(root, PROBE, rules) for label, root in roots.items()})


def test_probe_imports_the_real_modules(probes, stock_root, patched_root):
    for label, root in (("stock", stock_root), ("patched", patched_root)):
        assert probes[label]["module"].startswith(str(root(TARGET))), probes[label]["module"]


def test_patched_sends_every_count_in_released_lengths(probes):
    check_patched(probes["patched"]["released"], LENGTHS)


def test_stock_in_the_patched_role_fails(probes):
    """What the patched package is held to fails on stock: the suite tells the two apart (an
    installed stock wheel passed off as patched included, whose probe this is in the wheel run)."""
    with pytest.raises(AssertionError):
        check_patched(probes["stock"]["released"], LENGTHS)


def test_stock_refuses_the_other_lengths(probes):
    check_stock(probes["stock"]["released"], LENGTHS)


def test_patched_answers_as_stock_where_stock_had_the_kernel(probes):
    check_as_stock(probes["patched"]["released"], probes["stock"]["released"], probes["stock"]["every"])
