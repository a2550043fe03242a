"""The unit tests carried inside patches/sglang/0001-0004 and 0006-0009 run from
the patched tree and pass there, and fail against the stock sglang package.

They live in the patched tree in upstream's layout (``test/registered/unit/...``).
The test files are always taken from the patched tree; only the ``sglang``
package on PYTHONPATH changes (the tree's, or an installed wheel's).
Stubs inside those tests: ``deep_gemm`` and ``mega_moe_pre_dispatch`` (native
kernels), as in upstream's own MegaMoE unit tests.
"""

from __future__ import annotations

import pytest

from helpers import in_patch_test, run_pytest

UPSTREAM_TESTS = {
    "test/registered/unit/arg_groups/test_kimi_k3_mega_moe_token_budget.py": 13,
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py": 3,
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_decode_pool.py": 5,
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_shapes.py": 6,
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_unchunked.py": 10,
}
# The summary line each one ends with on the stock package.
STOCK_SUMMARY = {
    # Eight startup tables refused nothing / logged no clamp; a Qwen3-MoE
    # refusal has the generic wording; rows over the cap hit an assert, and a DP
    # rank with fewer rows launches once.
    "test/registered/unit/arg_groups/test_kimi_k3_mega_moe_token_budget.py": "12 failed, 1 passed",
    # The per-DP chunk divided twice (cap 384 passes) and never by attention TP.
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py": "4 failed, 1 passed",
    # Decode bounded by the graph's 64 requests; PP dynamic chunking unchecked;
    # the whole chunk asked for on every rank.
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_decode_pool.py": "5 failed",
    # The CP padding, adaptive widths, locked other phase and
    # warmups counted nowhere; NGRAM its verify width (the stock check is absent).
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_shapes.py": "6 failed",
    # Chunk-disabled prefill unbounded by the stock K3 path and refused by the
    # generic one; draft top-k rows counted nowhere.
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_unchunked.py": "9 failed, 1 passed",
}


@pytest.mark.parametrize("rel", sorted(UPSTREAM_TESTS))
def test_in_patch_tests_pass_on_patched(patched_root, tmp_path, rel):
    proc = run_pytest([patched_root("sglang")], in_patch_test("sglang", rel), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"{UPSTREAM_TESTS[rel]} passed" in out, out[-3000:]


@pytest.mark.parametrize("rel", sorted(UPSTREAM_TESTS))
def test_in_patch_tests_fail_on_stock(stock_root, tmp_path, rel):
    proc = run_pytest([stock_root("sglang")], in_patch_test("sglang", rel), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-6000:]
    # Stock starts every overflowing config: the refusals are never raised.
    assert "AssertionError: ValueError not raised" in out, out[-3000:]
    assert f"{STOCK_SUMMARY[rel]}, " in out, out[-3000:]
    if rel.endswith("test_kimi_k3_mega_moe_token_budget.py"):
        assert "AssertionError: mega MoE: num_tokens=65 exceeds" in out, out[-3000:]
