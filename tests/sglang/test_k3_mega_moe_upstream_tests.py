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

from helpers import check_pytest_run, in_patch_test, run_pytest, side_by_side

BUDGET = "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py"
PASSES = "test/registered/unit/layers/moe/test_mega_moe_passes.py"
# Each test's outcome on the stock package (all pass on the patched one), and a failing test with a
# line of its report.
STOCK = {
    # The per-DP chunk divided twice (cap 384 passes) and never by attention TP.
    BUDGET: (
        {
            "TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_not_divided_again": "failed",
            "TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_split_over_attention_tp": "failed",
            "TestMegaMoeTokenBudgetDataParallel::test_unaligned_per_dp_chunk_is_padded_to_attention_tp": "failed",
        },
        ("TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_not_divided_again", "ValueError not raised"),
    ),
    # Rows over the cap hit the assert (shared path and K3); there is no pass count, a DP rank with
    # fewer rows launches once, and MegaMoE leaves each DP rank only its own count under
    # --enable-dp-lm-head --moe-dense-tp-size 1. Rows at the cap and the busiest rank's choice of
    # MegaMoE were right.
    PASSES: (
        {
            "TestMegaMoePasses::test_a_graph_runs_one_pass_whatever_it_captured_before": "failed",
            "TestMegaMoePasses::test_every_dp_rank_runs_the_busiest_ranks_passes": "failed",
            "TestMegaMoePasses::test_every_dp_ranks_count_is_gathered_for_megamoe": "failed",
            "TestMegaMoePasses::test_one_warning_per_process": "failed",
            "TestMegaMoePasses::test_routing_in_the_buffer_survives_the_passes": "failed",
            "TestMegaMoePasses::test_rows_at_the_cap_run_in_one_pass": "passed",
            "TestMegaMoePasses::test_rows_over_the_cap_run_in_passes": "failed",
            "TestMegaMoePasses::test_should_use_mega_moe_by_the_busiest_rank": "passed",
            "TestKimiK3MegaMoePasses::test_k_passes_give_the_one_pass_output": "failed",
        },
        ("TestMegaMoePasses::test_rows_over_the_cap_run_in_passes", "mega MoE: num_tokens=40 exceeds cap"),
    ),
}


@pytest.fixture(scope="module")
def runs(patched_root, stock_root, tmp_path_factory):
    """Each file on each package, one pytest process a run, the runs side by side."""
    roots = {"patched": patched_root("sglang"), "stock": stock_root("sglang")}
    calls = {}
    for label, root in roots.items():
        for rel in STOCK:
            cwd = tmp_path_factory.mktemp(label)
            calls[label, rel] = lambda root=root, rel=rel, cwd=cwd: run_pytest(
                [root], in_patch_test("sglang", rel), cwd
            )
    return side_by_side(calls)


@pytest.mark.parametrize("rel", sorted(STOCK))
def test_in_patch_tests_pass_on_patched(runs, rel):
    check_pytest_run(runs["patched", rel], dict.fromkeys(STOCK[rel][0], "passed"))


@pytest.mark.parametrize("rel", sorted(STOCK))
def test_in_patch_tests_fail_on_stock(runs, rel):
    run = runs["stock", rel]
    outcomes, (failing, line) = STOCK[rel]
    check_pytest_run(run, outcomes)
    assert line in run.failures[failing], run.failures[failing][-3000:]
