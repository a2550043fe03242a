"""The DeepGEMM runner's copy_list_to_gpu_no_ce (patches/sglang/0003) over the lengths the
released kernels have.

The probe (tests/copy_list_probe.py, one subprocess per package) imports the REAL stock or
patched ``deep_gemm`` module and calls its ``copy_list_to_gpu_no_ce`` for every N in 1..513
and for tests/kernel/list_inputs.py's special inputs, over a stand-in for sgl-kernel's
``copy_to_gpu_no_ce`` that has kernels only for the lengths of a released copy.cu (sglang 0.5.23's
sglang-kernel 0.4.10: 32, 64, 72; the KT fork's: 64, 72) and raises ``unexpected N`` for the
others. The reference is stock's own answer over the same kernel, with the values where stock
was only missing a kernel for the length (stock's caller over a kernel with every length). Then the patch's own unit test, on
the patched tree and on stock. Cost: about 20 s per probe process (sglang's import).
"""

from __future__ import annotations

import json

import pytest

from copy_list_probe import IN_PATCH_OUTCOMES, IN_PATCH_TEST, expected, launches_ok
from helpers import REPO_ROOT, check_in_patch_test, run_probe, side_by_side

PROBE = REPO_ROOT / "tests" / "copy_list_probe.py"
TARGET = "sglang"
RULES = {"sglang-kernel": [32, 64, 72], "kt": [64, 72], "every": "every"}


@pytest.fixture(scope="module")
def probes(stock_root, patched_root):
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    return side_by_side(
        {label: lambda root=root: run_probe(root, PROBE, json.dumps(RULES)) for label, root in roots.items()}
    )


def test_probe_imports_the_real_modules(probes, stock_root, patched_root):
    for label, root in (("stock", stock_root), ("patched", patched_root)):
        assert probes[label]["module"].startswith(str(root(TARGET))), probes[label]["module"]


@pytest.mark.parametrize("rule", ["sglang-kernel", "kt"])
def test_patched_sends_every_count_in_released_lengths(probes, rule):
    counts = probes["patched"][rule]["counts"]
    assert {n: c for n, c in counts.items() if c["result"] != "ok"} == {}
    for n, c in counts.items():
        n = int(n)
        assert launches_ok(n, RULES[rule], c["launches"]), (n, c["launches"])


@pytest.mark.parametrize("rule", ["sglang-kernel", "kt"])
def test_stock_refuses_the_other_lengths(probes, rule):
    counts = probes["stock"][rule]["counts"]
    for n in (16, 17, 100, 513):
        assert counts[str(n)] == {"result": "refused", "error": "unexpected N", "launches": []}, n
    accepted = sorted(int(n) for n, c in counts.items() if c["result"] == "ok")
    assert accepted == RULES[rule]


@pytest.mark.parametrize("rule", ["sglang-kernel", "kt"])
def test_patched_answers_as_stock_where_stock_had_the_kernel(probes, rule):
    patched, stock = probes["patched"][rule], probes["stock"]
    differ = {
        case: (row["outcome"], want)
        for case, row in patched["special"].items()
        if row["outcome"] != (want := expected(stock[rule]["special"][case], stock["every"]["special"][case]))
    }
    assert differ == {}
    assert len(patched["special"]) >= 60
    assert {n: c["result"] for n, c in stock["every"]["counts"].items()} == dict.fromkeys(patched["counts"], "ok")


@pytest.mark.parametrize("label", ["patched", "stock"])
def test_in_patch_test(label, stock_root, patched_root, tmp_path):
    root = patched_root(TARGET) if label == "patched" else stock_root(TARGET)
    check_in_patch_test(root, TARGET, IN_PATCH_TEST, tmp_path, IN_PATCH_OUTCOMES[label])
