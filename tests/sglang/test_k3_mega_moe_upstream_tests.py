"""The unit tests carried inside patches/sglang/0001-0002 run from the patched tree
and pass there, and fail against the stock sglang package.

They live in the patched tree in upstream's layout (``test/registered/unit/...``).
The test files are always taken from the patched tree; only the ``sglang``
package on PYTHONPATH changes (the tree's, or an installed wheel's).
Stubs inside those tests: DeepGEMM's symmetric buffer and fused MegaMoE kernel and
``mega_moe_pre_dispatch`` (native kernels), replaced by a reference MoE.
"""

from __future__ import annotations

import pytest

from helpers import in_patch_test, run_pytest, side_by_side

UPSTREAM_TESTS = {
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py": 3,
    "test/registered/unit/layers/moe/test_mega_moe_passes.py": 9,
}
# The summary line each one ends with on the stock package, and a line of its output.
STOCK_SUMMARY = {
    # The per-DP chunk divided twice (cap 384 passes) and never by attention TP.
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py": (
        "4 failed, 1 passed",
        "AssertionError: ValueError not raised",
    ),
    # Rows over the cap hit the assert (shared path and K3); there is no pass
    # count, a DP rank with fewer rows launches once, and MegaMoE leaves each DP
    # rank only its own count under --enable-dp-lm-head --moe-dense-tp-size 1.
    "test/registered/unit/layers/moe/test_mega_moe_passes.py": (
        "11 failed, 4 passed",
        "AssertionError: mega MoE: num_tokens=40 exceeds cap",
    ),
}


@pytest.fixture(scope="module")
def runs(patched_root, stock_root, tmp_path_factory):
    """Each file on each package, one pytest process a run, the runs side by side."""
    roots = {"patched": patched_root("sglang"), "stock": stock_root("sglang")}
    calls = {}
    for label, root in roots.items():
        for rel in UPSTREAM_TESTS:
            cwd = tmp_path_factory.mktemp(label)
            calls[label, rel] = lambda root=root, rel=rel, cwd=cwd: run_pytest(
                [root], in_patch_test("sglang", rel), cwd
            )
    return side_by_side(calls)


@pytest.mark.parametrize("rel", sorted(UPSTREAM_TESTS))
def test_in_patch_tests_pass_on_patched(runs, rel):
    proc = runs["patched", rel]
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"{UPSTREAM_TESTS[rel]} passed" in out, out[-3000:]


@pytest.mark.parametrize("rel", sorted(UPSTREAM_TESTS))
def test_in_patch_tests_fail_on_stock(runs, rel):
    proc = runs["stock", rel]
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-6000:]
    summary, line = STOCK_SUMMARY[rel]
    assert line in out, out[-3000:]
    assert f"{summary}, " in out, out[-3000:]
